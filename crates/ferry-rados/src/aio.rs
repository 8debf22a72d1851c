//! librados completions as futures.
//!
//! librados calls back on its own finisher thread; the callback stores the result and wakes the
//! task. Whatever librados reads into or through (buffers, read ops) is owned by the shared
//! state, not by the future, so a future dropped early (a timeout, a cancelled transfer) never
//! leaves librados writing into freed memory.

use std::future::Future;
use std::os::raw::{c_int, c_void};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use ferry_store::Result;

use crate::cluster::check;
use crate::ffi;

struct Shared<K> {
    state: Mutex<State<K>>,
}

struct State<K> {
    rv: Option<c_int>,
    waker: Option<Waker>,
    keep: Option<K>,
}

/// One operation in flight; resolves to librados' return value and what it kept alive.
pub struct Aio<K: Send + 'static> {
    shared: Arc<Shared<K>>,
}

unsafe extern "C" fn on_complete<K>(c: ffi::rados_completion_t, arg: *mut c_void) {
    // SAFETY: `arg` is the reference `start` leaked for exactly this one callback.
    let shared = unsafe { Arc::from_raw(arg as *const Shared<K>) };
    // SAFETY: the completion is valid until released, and released once, here.
    let rv = unsafe {
        let rv = ffi::rados_aio_get_return_value(c);
        ffi::rados_aio_release(c);
        rv
    };
    let waker = {
        let mut s = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        s.rv = Some(rv);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

impl<K: Send + 'static> Aio<K> {
    /// Starts an operation: `submit` gets the completion and returns librados' submit code.
    /// `keep` (whose heap memory `submit` may point librados at) lives until completion.
    pub fn start(
        what: &str, keep: K, submit: impl FnOnce(ffi::rados_completion_t) -> c_int,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rv: None,
                waker: None,
                keep: Some(keep),
            }),
        });
        let arg = Arc::into_raw(shared.clone()) as *mut c_void;
        let mut c: ffi::rados_completion_t = std::ptr::null_mut();
        // SAFETY: `arg` stays valid (one strong count) until the callback takes it back.
        let rc = unsafe { ffi::rados_aio_create_completion2(arg, Some(on_complete::<K>), &mut c) };
        if let Err(e) = check(rc, what) {
            // SAFETY: no callback will run; take back the reference leaked for it.
            drop(unsafe { Arc::from_raw(arg as *const Shared<K>) });
            return Err(e);
        }
        let rc = submit(c);
        if rc < 0 {
            // SAFETY: the operation was refused, so no callback runs: release both here.
            unsafe {
                ffi::rados_aio_release(c);
                drop(Arc::from_raw(arg as *const Shared<K>));
            }
            check(rc, what)?;
        }
        Ok(Self { shared })
    }
}

impl<K: Send + 'static> Future for Aio<K> {
    type Output = (c_int, K);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.rv {
            Some(rv) => Poll::Ready((rv, s.keep.take().expect("polled after completion"))),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

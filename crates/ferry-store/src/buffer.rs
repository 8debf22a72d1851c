//! Block buffers, reused. A fresh multi-MiB buffer comes from mmap: every one of its pages
//! faults and is zeroed by the kernel on first touch, which was a fifth of a `ferry cp` to
//! RADOS (perf). Buffers freed go back to a small pool instead, and the next block of about
//! the same size reuses one; the pool is bounded, so RSS stays within the engine's budget
//! plus [`POOL_BYTES`].

use std::sync::Mutex;

use bytes::Bytes;

/// Most bytes the pool keeps while no block uses them.
pub const POOL_BYTES: usize = 32 << 20;
/// Smaller buffers come from the allocator as usual: its own free lists serve them well.
const MIN_POOLED: usize = 64 << 10;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of some length whose memory returns to the pool when dropped, also from inside
/// the [`Bytes`] made by [`Buffer::freeze`].
#[derive(Debug)]
pub struct Buffer {
    buf: Vec<u8>,
    len: usize,
}

/// A buffer of `len` bytes. Its content is unspecified (an earlier block's bytes): the caller
/// overwrites all of it.
pub fn take(len: usize) -> Buffer {
    if len >= MIN_POOLED {
        if let Some(mut buf) = pooled(len) {
            // Only bytes a shorter earlier use left uninitialized are written (its pages
            // are mapped already).
            if buf.len() < len {
                buf.resize(len, 0);
            }
            return Buffer { buf, len };
        }
    }
    // Zeroed by the allocator, which leaves fresh pages to the kernel instead of writing them.
    let mut buf = vec![0; class(len)];
    buf.truncate(len);
    Buffer { buf, len }
}

/// An empty vector with room for `cap` bytes, from the pool when one fits: for a buffer
/// filled by appending (a pack). Hand it back through [`bytes`].
pub fn with_capacity(cap: usize) -> Vec<u8> {
    if cap >= MIN_POOLED {
        if let Some(mut v) = pooled(cap) {
            v.clear();
            return v;
        }
    }
    Vec::with_capacity(class(cap))
}

/// Immutable bytes over `v` that return its memory to the pool when the last clone drops.
pub fn bytes(v: Vec<u8>) -> Bytes {
    let len = v.len();
    Buffer { buf: v, len }.freeze()
}

/// `len` rounded up to a quarter of its power of two: buffers asked for sizes that differ by
/// a few bytes (4 MiB reads cut at blob boundaries) then share one size and reuse each other.
fn class(len: usize) -> usize {
    if len < MIN_POOLED {
        return len;
    }
    let step = (1usize << len.ilog2()) / 4;
    len.div_ceil(step) * step
}

/// The most recently pooled vector with a capacity of `len` to twice that, so that a small
/// block does not pin a large buffer.
fn pooled(len: usize) -> Option<Vec<u8>> {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let i = pool
        .iter()
        .rposition(|b| b.capacity() >= len && b.capacity() / 2 <= len)?;
    Some(pool.remove(i))
}

impl Buffer {
    /// Shortens the buffer to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Immutable bytes that return the memory to the pool when the last clone drops.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

/// Returns a buffer [`with_capacity`] gave, for the next one to reuse.
pub fn give_back(v: Vec<u8>) {
    drop(Buffer { len: 0, buf: v });
}

impl AsRef<[u8]> for Buffer {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.buf.capacity() < MIN_POOLED {
            return;
        }
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        pool.push(std::mem::take(&mut self.buf));
        // Over the bound, the oldest go: the sizes in use now are those of the newest.
        let mut held: usize = pool.iter().map(Vec::capacity).sum();
        let mut old = 0;
        while held > POOL_BYTES {
            held -= pool[old].capacity();
            old += 1;
        }
        // Freed after the lock is released: unmapping is a system call.
        let evicted: Vec<Vec<u8>> = pool.drain(..old).collect();
        drop(pool);
        drop(evicted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_buffer_is_reused_and_sized_as_asked() {
        let len = 3 << 20;
        let mut a = take(len);
        a[0] = 7;
        let ptr = a.as_ptr();
        let bytes = a.freeze();
        assert_eq!(bytes.len(), len);
        drop(bytes);
        // Another test may take it first: look for it among a few.
        let got: Vec<Buffer> = (0..8).map(|_| take(len - 5)).collect();
        assert!(got.iter().all(|b| b.len() == len - 5));
        assert!(got.iter().any(|b| b.as_ptr() == ptr), "not reused");
        // Far smaller blocks do not take it.
        drop(got);
        assert!(take(MIN_POOLED).as_ptr() != ptr);
    }

    #[test]
    fn sizes_a_few_bytes_apart_share_a_class() {
        assert_eq!(class(4_193_519), 4 << 20);
        assert_eq!(class(4 << 20), 4 << 20);
        assert_eq!(class((4 << 20) + 1), 5 << 20);
        assert_eq!(class(1_078_524), 5 << 18);
        assert_eq!(class(1000), 1000);
        let big = take(4_193_519);
        assert_eq!(big.buf.capacity(), 4 << 20);
        assert_eq!(big.len(), 4_193_519);
    }
}

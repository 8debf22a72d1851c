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

/// A pooled buffer not taken again within this many takes goes back to the allocator: a
/// size no block asks for any more (a restore's blobs vary in size) would otherwise sit in
/// the pool as idle memory up to its bound.
const STALE_TAKES: u64 = 8;

/// Idle buffers, oldest first, each with the count of takes when it came back.
static POOL: Mutex<Pool> = Mutex::new(Pool {
    idle: Vec::new(),
    takes: 0,
});

struct Pool {
    idle: Vec<(Vec<u8>, u64)>,
    takes: u64,
}

impl Pool {
    /// The most recently pooled vector with a capacity of `len` to twice that, so that a
    /// small block does not pin a large buffer.
    fn take(&mut self, len: usize) -> Option<Vec<u8>> {
        self.takes += 1;
        let i = self
            .idle
            .iter()
            .rposition(|(b, _)| b.capacity() >= len && b.capacity() / 2 <= len)?;
        Some(self.idle.remove(i).0)
    }

    /// Keeps `buf` for a later take; returns what goes back to the allocator: the oldest,
    /// over the bound or stale (the sizes in use now are the newest's).
    fn put(&mut self, buf: Vec<u8>) -> Vec<(Vec<u8>, u64)> {
        let now = self.takes;
        self.idle.push((buf, now));
        let mut held: usize = self.idle.iter().map(|(b, _)| b.capacity()).sum();
        let mut old = 0;
        while old < self.idle.len() && (held > POOL_BYTES || self.idle[old].1 + STALE_TAKES < now) {
            held -= self.idle[old].0.capacity();
            old += 1;
        }
        self.idle.drain(..old).collect()
    }
}

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

/// `parts` one after the other in one pooled buffer ([`bytes`]): a block put together from
/// pieces read apart.
pub fn concat(parts: &[&[u8]]) -> Bytes {
    let mut v = with_capacity(parts.iter().map(|p| p.len()).sum());
    parts.iter().for_each(|p| v.extend_from_slice(p));
    bytes(v)
}

/// `len` rounded up to a quarter of its power of two: buffers asked for sizes that differ by
/// a few bytes (4 MiB reads cut at blob boundaries) then share one size and reuse each other.
pub(crate) fn class(len: usize) -> usize {
    if len < MIN_POOLED {
        return len;
    }
    let step = (1usize << len.ilog2()) / 4;
    len.div_ceil(step) * step
}

/// The capacities of the buffers the pool holds now.
#[cfg(test)]
pub(crate) fn idle_capacities() -> Vec<usize> {
    let pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    pool.idle.iter().map(|(b, _)| b.capacity()).collect()
}

/// A pooled vector for `len` bytes ([`Pool::take`]).
fn pooled(len: usize) -> Option<Vec<u8>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner()).take(len)
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
        let buf = std::mem::take(&mut self.buf);
        let evicted = POOL.lock().unwrap_or_else(|e| e.into_inner()).put(buf);
        // Freed after the lock is released: unmapping is a system call.
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
    fn a_size_no_one_asks_for_again_leaves_the_pool() {
        let mut pool = Pool {
            idle: Vec::new(),
            takes: 0,
        };
        let (odd, usual) = (3 << 20, 1 << 20);
        assert!(pool.put(Vec::with_capacity(odd)).is_empty());
        // Blocks of the usual size come and go; the odd one is never asked for.
        for _ in 0..STALE_TAKES {
            let b = pool
                .take(usual)
                .unwrap_or_else(|| Vec::with_capacity(usual));
            assert!(pool.put(b).is_empty(), "evicted before it went stale");
        }
        let b = pool.take(usual).expect("the usual buffer stays");
        let evicted = pool.put(b);
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].0.capacity(), odd);
        assert_eq!(pool.idle.len(), 1);
        assert_eq!(pool.idle[0].0.capacity(), usual);
        // Over the bound, the oldest go even when fresh.
        for _ in 0..(POOL_BYTES / usual) {
            pool.put(Vec::with_capacity(usual));
        }
        let held: usize = pool.idle.iter().map(|(b, _)| b.capacity()).sum();
        assert!(held <= POOL_BYTES);
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

//! Argon2's working memory, mapped for one key derivation and backed by huge pages where the
//! kernel has them. Argon2id at 64 MiB touches every page once: through 4 KiB pages that is
//! 16k page faults, each zeroing a page, a third of a derivation here (measured: 125-190 ms
//! per derivation with the allocator's memory, 86-98 ms with huge pages). Every command that
//! opens a repository pays one.

use argon2::Block;
use ferry_transfer::{Error, Result};

/// Memory for `n` Argon2 blocks, unmapped on drop.
pub(crate) struct KdfMemory {
    ptr: *mut libc::c_void,
    len: usize,
}

impl KdfMemory {
    /// Maps zeroed memory for `n` blocks; a size the machine cannot map is an error, not an
    /// abort (the count comes from a key file).
    pub(crate) fn new(n: usize) -> Result<Self> {
        let len = n
            .checked_mul(std::mem::size_of::<Block>())
            .ok_or_else(|| Error::Invalid(format!("key file: {n} KiB of Argon2 memory")))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::Invalid(format!(
                "key file: {n} KiB of Argon2 memory: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: the range was just mapped. Only advice: without huge pages, 4 KiB ones.
        unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        Ok(Self { ptr, len })
    }

    /// The blocks, zeroed at first.
    pub(crate) fn blocks(&mut self) -> &mut [Block] {
        // SAFETY: the mapping holds len bytes, page-aligned (Block asks for 64), readable and
        // writable, and lives as long as self; all-zero bytes are a valid Block (plain u64s).
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.cast::<Block>(),
                self.len / std::mem::size_of::<Block>(),
            )
        }
    }
}

impl Drop for KdfMemory {
    fn drop(&mut self) {
        // SAFETY: ptr and len are the mapping made in new, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

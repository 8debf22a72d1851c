//! Fixed-size blocks of one file, cut by several threads at once when the file is big: one
//! 1 GiB relation segment read, hashed, compressed and sealed by one thread would bound a
//! whole database backup.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ferry_transfer::{Error, Result};

use crate::id::Id;

/// What reading one range gave: an I/O error, or what storing its blocks gave.
type Cut = std::io::Result<Result<(Vec<Id>, u64)>>;

/// Bytes one thread takes at a time.
const STRIDE: u64 = 32 << 20;

/// How a block is stored: given its offset in the file and its bytes, its blob's id.
pub type Store<'a> = &'a (dyn Fn(u64, &[u8]) -> Result<Id> + Sync);

/// Reads `[start, end)` of `f` (to the end of the file when `end` is `None`) in `block`-byte
/// pieces, handing each to `store`; the ids in order and the bytes read.
fn cut_range(f: &File, start: u64, end: Option<u64>, block: usize, store: Store) -> Cut {
    let mut buf = vec![0u8; block];
    let (mut ids, mut off) = (Vec::new(), start);
    while end.is_none_or(|e| off < e) {
        let mut n = 0;
        while n < block {
            match f.read_at(&mut buf[n..], off + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if n == 0 {
            break;
        }
        match store(off, &buf[..n]) {
            Ok(id) => ids.push(id),
            Err(e) => return Ok(Err(e)),
        }
        off += n as u64;
        if n < block {
            break;
        }
    }
    Ok(Ok((ids, off - start)))
}

/// Cuts `f` (`size` bytes when it was listed) into blocks of `block` bytes; the ids in file
/// order and the bytes read. Beyond [`STRIDE`], ranges go to as many threads as there are
/// cores; the last range reads on to the end of the file, as a lone reader would.
pub fn cut(
    f: &File, size: u64, block: u32, store: Store, what: &dyn std::fmt::Display,
) -> Result<(Vec<Id>, u64)> {
    let io = |e| Error::io(what, e);
    let block = block as usize;
    let stride = STRIDE.div_ceil(block as u64) * block as u64;
    let ranges = size.div_ceil(stride).max(1) as usize;
    if ranges == 1 {
        return cut_range(f, 0, None, block, store).map_err(io)?;
    }
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(ranges);
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Cut>>> = (0..ranges).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let r = next.fetch_add(1, Ordering::Relaxed);
                if r >= ranges {
                    break;
                }
                let start = r as u64 * stride;
                let end = (r + 1 < ranges).then_some(start + stride);
                let out = cut_range(f, start, end, block, store);
                let failed = !matches!(out, Ok(Ok(_)));
                *results[r].lock().expect("results") = Some(out);
                if failed {
                    // The others stop at their next range.
                    next.store(ranges, Ordering::Relaxed);
                    break;
                }
            });
        }
    });
    let (mut ids, mut read) = (Vec::new(), 0u64);
    for (r, slot) in results.into_iter().enumerate() {
        match slot.into_inner().expect("results") {
            Some(out) => {
                let (i, n) = out.map_err(io)??;
                ids.extend(i);
                read += n;
                // A range cut short by the file's end: whatever follows is past it too.
                if n < stride && r + 1 < ranges {
                    break;
                }
            }
            None => break,
        }
    }
    Ok((ids, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_in_file_order_across_ranges() {
        let dir = std::env::temp_dir().join(format!("ferry-blocks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        let size = 2 * STRIDE + 12345;
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let seen = Mutex::new(Vec::new());
        let store = |_: u64, b: &[u8]| {
            let id = Id::of(b);
            seen.lock().unwrap().push((id, b.to_vec()));
            Ok(id)
        };
        let (ids, read) = cut(&f, size, 64 << 10, &store, &"f").unwrap();
        assert_eq!(read, size);
        let blobs: std::collections::HashMap<Id, Vec<u8>> =
            seen.into_inner().unwrap().into_iter().collect();
        let joined: Vec<u8> = ids.iter().flat_map(|i| blobs[i].clone()).collect();
        assert_eq!(joined, data);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

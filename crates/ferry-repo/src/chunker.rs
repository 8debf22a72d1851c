//! Content-defined chunks of a file, cut exactly where fastcdc's `StreamCDC` cuts (FastCDC
//! 2020, normalization level 1), with less memory and copying: `StreamCDC` keeps a buffer of
//! the largest chunk (8 MiB) filled for every file, copies each chunk out of it and moves the
//! rest down after every chunk. Here the buffer holds what the next cut needs: twice the
//! average chunk at first, more only while no cut point is found (the search then runs again
//! over the longer buffer: cut points depend only on the bytes from the chunk's start, so the
//! first one found in a prefix is the first one in the whole), and the chunk is lent, not
//! copied. With four large files read at once, that is 4 x 2 MiB held instead of 4 x 8 MiB.

use std::io::{ErrorKind, Read};

use fastcdc::v2020::FastCDC;

/// Chunks of a reader.
pub(crate) struct Chunker<R> {
    src: R,
    /// `buf[start..end]` is read and not yet handed out; `buf.len()` is only ever grown
    /// (zeroed once), and shrunk back after an unusually long chunk.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    min: u32,
    avg: u32,
    max: u32,
}

impl<R: Read> Chunker<R> {
    /// Chunks of `src` between `min` and `max` bytes, `avg` on average (as `StreamCDC::new`).
    pub(crate) fn new(src: R, min: u32, avg: u32, max: u32) -> Self {
        Self {
            src,
            buf: Vec::new(),
            start: 0,
            end: 0,
            eof: false,
            min,
            avg,
            max,
        }
    }

    /// The first read: enough that most chunks are cut without a second search.
    fn first_want(&self) -> usize {
        (2 * self.avg as usize).min(self.max as usize)
    }

    /// Reads until `want` bytes are held from the chunk's start, or the source ends.
    fn fill(&mut self, want: usize) -> std::io::Result<()> {
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while !self.eof && self.end < want {
            match self.src.read(&mut self.buf[self.end..want]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next chunk, lent until the next call; `None` at the end of the source.
    pub(crate) fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        // What the last chunk left moves to the front: less than the first read, where
        // StreamCDC moves all but the chunk of 8 MiB.
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let keep = self.first_want();
        if self.buf.len() > keep && self.end <= keep {
            // A long chunk grew the buffer: its memory goes back.
            self.buf.truncate(keep);
            self.buf.shrink_to(keep);
        }
        let mut want = keep;
        loop {
            self.fill(want)?;
            let held = self.end;
            if held == 0 {
                return Ok(None);
            }
            let cdc = FastCDC::new(&self.buf[..held], self.min, self.avg, self.max);
            let (_, cut) = cdc.cut(0, held);
            // No cut point in what is held yet (`cut == held`): read on, unless that is all
            // there is or all a chunk may be.
            if cut < held || self.eof || held >= self.max as usize {
                self.start = cut;
                return Ok(Some(&self.buf[..cut]));
            }
            want = (held * 2).min(self.max as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads at most `step` bytes a call, as a pipe or a slow disk may.
    struct Trickle<'a>(&'a [u8], usize);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(out.len()).min(self.1);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn chunks(data: &[u8], step: usize, (min, avg, max): (u32, u32, u32)) -> Vec<Vec<u8>> {
        let mut c = Chunker::new(Trickle(data, step), min, avg, max);
        let mut out = Vec::new();
        while let Some(ch) = c.next_chunk().unwrap() {
            out.push(ch.to_vec());
        }
        out
    }

    fn stream_cdc(data: &[u8], (min, avg, max): (u32, u32, u32)) -> Vec<Vec<u8>> {
        fastcdc::v2020::StreamCDC::new(data, min, avg, max)
            .map(|c| c.unwrap().data)
            .collect()
    }

    /// Pseudo-random bytes with long runs of one byte (cut nowhere: max-size chunks) and
    /// stretches that repeat.
    fn corpus(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 7 {
                0 => out.extend(std::iter::repeat_n(0u8, (x >> 8) as usize % 300_000)),
                1 if out.len() > 100_000 => {
                    let from = (x >> 8) as usize % (out.len() - 50_000);
                    out.extend_from_within(from..from + 50_000);
                }
                _ => {
                    for _ in 0..512 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
        }
        out.truncate(len);
        out
    }

    #[test]
    fn cuts_where_stream_cdc_cuts() {
        // Small sizes, so that a few MiB hold hundreds of chunks, long ones included.
        let sizes = (4096, 16384, 65536);
        for (seed, len) in [(1, 3 << 20), (2, 1), (3, 5000), (4, 70_000), (5, 0)] {
            let data = corpus(len, seed);
            let want = stream_cdc(&data, sizes);
            for step in [1 << 20, 4097, 100] {
                let got = chunks(&data, step, sizes);
                assert_eq!(got.len(), want.len(), "seed {seed} step {step}");
                assert!(got == want, "seed {seed} step {step}: cut elsewhere");
            }
        }
        // ferry's own sizes, and a file of zeros (every chunk the largest).
        let sizes = (512 << 10, 1 << 20, 8 << 20);
        for data in [corpus(24 << 20, 9), vec![0u8; 20 << 20]] {
            assert!(chunks(&data, 1 << 20, sizes) == stream_cdc(&data, sizes));
        }
    }

    #[test]
    fn gives_back_what_a_long_chunk_took() {
        let sizes = (512 << 10, 1 << 20, 8 << 20);
        let mut data = vec![0u8; 8 << 20];
        data.extend(corpus(6 << 20, 3));
        let mut c = Chunker::new(&data[..], sizes.0, sizes.1, sizes.2);
        assert_eq!(c.next_chunk().unwrap().unwrap().len(), 8 << 20);
        assert_eq!(c.buf.capacity(), 8 << 20);
        // The next chunk starts over from twice the average (more only if it needs it).
        let next = c.next_chunk().unwrap().unwrap().len();
        assert!(
            c.buf.capacity() < 8 << 20,
            "{} after {next}",
            c.buf.capacity()
        );
        assert!(
            c.buf.capacity() <= (2 << 20).max(2 * next),
            "{}",
            c.buf.capacity()
        );
    }
}

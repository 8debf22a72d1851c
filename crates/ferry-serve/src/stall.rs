//! A connection whose writing fails once it stalls or crawls. An answer holds its memory
//! until hyper has written it, and hyper has no write timeout: a client that asks for an
//! object and reads nothing of it, or a byte now and then, would otherwise keep that memory,
//! taken from its tenant's share and from everyone's, for as long as it keeps the socket
//! open. As for bodies coming in, a reader slower than a floor rate is cut off; a slow
//! reader above it is not.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, whose writes, flushes and shutdowns fail with `TimedOut` once they have been
/// pending for `limit` with nothing written, or once the time they spent waiting for the
/// client adds up to `limit` with less than `min_rate` bytes a second written meanwhile. Only
/// time spent waiting for the client counts: an answer written at once costs none, and a
/// client that sends a small request a second and reads each small answer at once is never
/// slow, however little it is sent.
pub struct StallIo<T> {
    inner: T,
    limit: Duration,
    min_rate: u64,
    /// Runs while a write is pending; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
    /// Since when the write now pending has waited.
    waiting_since: Option<Instant>,
    /// Time spent waiting for the client, and bytes written, since the rate was last judged.
    waited: (Duration, u64),
}

impl<T> StallIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, limit: Duration, min_rate: u64) -> StallIo<T> {
        StallIo {
            inner,
            limit,
            min_rate,
            stalled: None,
            waiting_since: None,
            waited: (Duration::ZERO, 0),
        }
    }

    fn timed_out(why: &str) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, why.to_string())
    }

    /// Passes a ready result on (counting what it wrote); a pending one waits at most
    /// `limit`.
    fn watch<R>(
        &mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>, wrote: impl Fn(&R) -> u64,
    ) -> Poll<io::Result<R>> {
        let n = match &r {
            Poll::Ready(Ok(v)) => wrote(v),
            Poll::Ready(Err(_)) => return r,
            Poll::Pending => {
                self.waiting_since.get_or_insert_with(Instant::now);
                let limit = self.limit;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                return match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(Self::timed_out(
                        "the client read nothing of its answer for too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                };
            }
        };
        self.stalled = None;
        self.waited.1 += n;
        if let Some(since) = self.waiting_since.take() {
            self.waited.0 += since.elapsed();
            let (waited, sum) = self.waited;
            if waited >= self.limit {
                if (sum as f64) < self.min_rate as f64 * waited.as_secs_f64() {
                    return Poll::Ready(Err(Self::timed_out(
                        "the client read its answer too slowly",
                    )));
                }
                self.waited = (Duration::ZERO, 0);
            }
        }
        r
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, r, |n| *n as u64)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, r, |n| *n as u64)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r, |_| 0)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r, |_| 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    const LIMIT: Duration = Duration::from_secs(30);
    const FLOOR: u64 = 64 << 10;

    /// Reads `chunk` bytes every `every` until the other end closes; returns the total.
    fn reader(
        mut far: DuplexStream, chunk: usize, every: Duration,
    ) -> tokio::task::JoinHandle<usize> {
        tokio::spawn(async move {
            let (mut got, mut buf) = (0, vec![0u8; chunk]);
            loop {
                tokio::time::sleep(every).await;
                match far.read(&mut buf).await {
                    Ok(0) | Err(_) => return got,
                    Ok(n) => got += n,
                }
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_reads_nothing_is_cut_off() {
        let (near, _far) = tokio::io::duplex(1024);
        let mut io = StallIo::new(near, LIMIT, FLOOR);
        let started = Instant::now();
        let e = io.write_all(&[7u8; 64 << 10]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= LIMIT, "cut off early");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_below_the_floor_is_cut_off() {
        // 1 KiB every 20 s: never 30 s without a byte, far below 64 KiB a second.
        let (near, far) = tokio::io::duplex(1024);
        let mut io = StallIo::new(near, LIMIT, FLOOR);
        let _r = reader(far, 1024, Duration::from_secs(20));
        let e = io.write_all(&[7u8; 1 << 20]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("too slowly"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_above_the_floor_is_not() {
        // 64 KiB every 250 ms (256 KiB a second) for 8 MiB: 32 s, more than one window.
        let (near, far) = tokio::io::duplex(64 << 10);
        let mut io = StallIo::new(near, LIMIT, FLOOR);
        let r = reader(far, 64 << 10, Duration::from_millis(250));
        io.write_all(&vec![7u8; 8 << 20]).await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        assert_eq!(r.await.unwrap(), 8 << 20);
    }

    #[tokio::test(start_paused = true)]
    async fn small_answers_read_at_once_are_never_slow() {
        // A WAL client: a small answer every second, read at once, for five minutes: far
        // below 64 KiB a second, none of it waiting for the client (the bench's WAL pushers
        // were cut every 30 s).
        let (near, far) = tokio::io::duplex(64 << 10);
        let mut io = StallIo::new(near, LIMIT, FLOOR);
        let r = reader(far, 64 << 10, Duration::from_millis(10));
        for _ in 0..300 {
            io.write_all(&[1u8; 100]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        io.shutdown().await.unwrap();
        drop(io);
        assert_eq!(r.await.unwrap(), 30_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_between_answers_is_not_slowness() {
        let (near, far) = tokio::io::duplex(64 << 10);
        let mut io = StallIo::new(near, LIMIT, FLOOR);
        let r = reader(far, 64 << 10, Duration::from_millis(10));
        // Two small answers, two minutes of keep-alive apart.
        io.write_all(&[1u8; 100]).await.unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
        io.write_all(&[2u8; 100]).await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        assert_eq!(r.await.unwrap(), 200);
    }
}

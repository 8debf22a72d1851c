//! Answers' bodies, and the body memory they hold until written: an object's bytes whole in
//! memory (read from a store with round trips), or read from an open file a chunk at a time
//! as the client takes them (a directory backend, as rest-server copies from the file).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use ferry_store::Opened;
use futures::stream::BoxStream;
use futures::StreamExt;
use http_body::{Frame, SizeHint};
use http_body_util::Full;
use tokio::sync::OwnedSemaphorePermit;

/// Memory held for one body: the tenant's share (none for an urgent body taken from the
/// reserve) and everyone's, or the urgent reserve's.
pub type Held = (Option<OwnedSemaphorePermit>, OwnedSemaphorePermit);

/// An answer's body. An object's bytes carry the memory permits they were read under (see
/// [`Pinned`]), given back when hyper has written them, not when it takes them.
pub enum Out {
    /// All of it in memory.
    Whole(Full<Bytes>),
    /// Chunks read as hyper asks for them; the bytes still to come.
    Streamed(BoxStream<'static, Result<Bytes, ferry_store::Error>>, u64),
}

impl Out {
    /// `bytes`, whole.
    pub fn whole(bytes: impl Into<Bytes>) -> Out {
        Out::Whole(Full::new(bytes.into()))
    }

    /// An object's bytes in memory, holding `held` until hyper has written them.
    pub fn pinned(bytes: Bytes, held: Held) -> Out {
        Out::whole(pin(bytes, &Arc::new(held)))
    }

    /// `range` of `file`, read `chunk` bytes at a time as hyper takes them, each chunk
    /// holding `held` (room for the chunk being read and one hyper holds unwritten) until
    /// hyper has written it: hyper drops a body once it has taken its last frame, with that
    /// frame still to be written to a client that may not be reading. A read that fails ends
    /// the answer short: hyper then closes the connection, and the client sees less than the
    /// Content-Length it was told. (Reading the next chunk while hyper writes one bought
    /// nothing measurable: bench/README.md, "Bodies and answers through the file".)
    pub fn streamed(file: Opened, range: std::ops::Range<u64>, chunk: u64, held: Held) -> Out {
        let len = range.end - range.start;
        let end = range.end;
        let held = Arc::new(held);
        let parts = (range.start..end).step_by(chunk as usize);
        let reads = futures::stream::iter(parts).then(move |at| {
            let (file, held) = (file.clone(), held.clone());
            async move {
                let bytes = file.read(at..(at + chunk).min(end)).await?;
                Ok(pin(bytes, &held))
            }
        });
        Out::Streamed(reads.boxed(), len)
    }
}

/// `bytes` holding `held` until the last clone of them drops (hyper has written them).
fn pin(bytes: Bytes, held: &Arc<Held>) -> Bytes {
    Bytes::from_owner(Pinned {
        bytes,
        _held: held.clone(),
    })
}

impl Default for Out {
    fn default() -> Out {
        Out::whole(Bytes::new())
    }
}

impl http_body::Body for Out {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Out::Whole(body) => Pin::new(body)
                .poll_frame(cx)
                .map_err(|never| match never {}),
            Out::Streamed(chunks, left) => match chunks.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(b))) => {
                    *left = left.saturating_sub(b.len() as u64);
                    Poll::Ready(Some(Ok(Frame::data(b))))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(std::io::Error::other(e)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Out::Whole(body) => body.is_end_stream(),
            Out::Streamed(_, left) => *left == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Out::Whole(body) => body.size_hint(),
            Out::Streamed(_, left) => SizeHint::with_exact(*left),
        }
    }
}

/// Bytes with the memory permits they hold: hyper drops the body once it has taken its last
/// frame, long before a client that reads slowly (or not at all) has the bytes; the frame
/// itself lives until written, so the permits go with it (with the last of an answer's
/// frames, when it has several).
struct Pinned {
    bytes: Bytes,
    _held: Arc<Held>,
}

impl AsRef<[u8]> for Pinned {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

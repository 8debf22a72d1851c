//! Answers read into memory with a bound. The store, or whatever answers in its place,
//! decides how long an answer is: a hostile one could send more than memory holds, where
//! ferry asked for one block or one small file.

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::{Error, Result};

/// The longest object [`Store::get`](crate::Store::get) reads whole: a sealed WAL segment of
/// PostgreSQL's largest size (1 GiB) fits, and repository files are far smaller. A longer
/// one, planted or swapped in by whoever writes to the store, is refused.
pub const MAX_GET: u64 = (1 << 30) + (1 << 20);

/// Reads `body` to its end, at most `limit` bytes: reading stops, with an error, at the first
/// chunk past it. `hint` is the length expected, reserved at once so that a long answer in
/// many chunks is copied once, in a buffer from the pool ([`crate::buffer`]): a fresh one of a
/// block's size faults in every page, which was a sixth of a download's CPU (perf, lossy).
pub async fn collect<S>(mut body: S, limit: u64, hint: u64, what: &str) -> Result<Bytes>
where
    S: Stream<Item = Result<Bytes>> + Unpin,
{
    let too_long = || Error::Permanent(format!("{what}: the answer is longer than {limit} bytes"));
    let Some(first) = body.next().await.transpose()? else {
        return Ok(Bytes::new());
    };
    if first.len() as u64 > limit {
        return Err(too_long());
    }
    let Some(second) = body.next().await.transpose()? else {
        return Ok(first);
    };
    let mut all = crate::buffer::with_capacity(hint.min(limit) as usize);
    all.extend_from_slice(&first);
    let mut next = Some(second);
    while let Some(chunk) = next {
        if (all.len() + chunk.len()) as u64 > limit {
            return Err(too_long());
        }
        all.extend_from_slice(&chunk);
        next = body.next().await.transpose()?;
    }
    Ok(crate::buffer::bytes(all))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(n: usize, len: usize) -> impl Stream<Item = Result<Bytes>> + Unpin {
        futures::stream::iter((0..n).map(move |_| Ok(Bytes::from(vec![7u8; len]))))
    }

    #[tokio::test]
    async fn an_answer_is_read_up_to_its_bound_and_no_further() {
        assert_eq!(collect(chunks(0, 1), 10, 0, "k").await.unwrap().len(), 0);
        assert_eq!(collect(chunks(1, 10), 10, 10, "k").await.unwrap().len(), 10);
        assert_eq!(collect(chunks(5, 2), 10, 10, "k").await.unwrap().len(), 10);
        let e = collect(chunks(6, 2), 10, 10, "k").await.unwrap_err();
        assert!(e.to_string().contains("longer than 10 bytes"), "{e}");
        assert!(collect(chunks(1, 11), 10, 10, "k").await.is_err());
        // An endless answer ends at the bound.
        let endless = futures::stream::repeat_with(|| Ok(Bytes::from_static(b"x")));
        assert!(collect(endless, 1 << 16, 0, "k").await.is_err());
    }

    #[tokio::test]
    async fn a_block_long_answer_goes_back_to_the_pool() {
        // A size no other test asks for, so that no one takes it from the pool meanwhile.
        let (chunk, n) = ((6 << 20) / 8 + 3, 8);
        let got = collect(chunks(n, chunk), 8 << 20, (chunk * n) as u64, "k").await;
        let got = got.unwrap();
        assert_eq!(got.len(), chunk * n);
        assert!(got.iter().all(|b| *b == 7));
        let cap = crate::buffer::class(chunk * n);
        assert!(!crate::buffer::idle_capacities().contains(&cap));
        drop(got);
        assert!(
            crate::buffer::idle_capacities().contains(&cap),
            "not pooled"
        );
    }
}

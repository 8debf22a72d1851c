//! Store-to-store copy of one object; local files are stores too, so this is also upload and
//! download to and from disk.

use std::ops::Range;

use bytes::Bytes;
use ferry_store::{BlockId, Error, Meta, ObjectInfo, Result, Upload, META_BLOCKS, META_DIGEST};
use futures::{StreamExt, TryStreamExt};

use crate::digest::{self, BlockSum, Need};
use crate::started::Started;
use crate::{sum_of, BlockPlan, Class, Engine, Progress, SharedStore, Way, ABORT_TIMEOUT};

/// Leftovers of a completed upload deleted at once: one request each, about 200 for 1 GiB
/// on GCS, and on an 80 ms link one after another they took longer than the upload's blocks.
const LEFTOVER_DELETES: usize = 16;

/// Blocks read from local disk and hashed while they wait for a slot: one is ready whenever
/// a request ends (reading and hashing 5 MiB takes tens of milliseconds, a request on a WAN
/// most of a second), and the memory they hold stays small beside the requests in flight.
const READ_AHEAD: usize = 4;
/// Bytes read from a remote store with an object's description: objects this small come
/// in one request; waiting for them delays a large download by 16 ms at 8 MB/s.
const FIRST_READ: u64 = crate::LIGHT_BYTES;

/// Pieces block `i` of `count` is read in, when `wave` blocks are on the wire at once: the
/// last wave of an object larger than one comes in ranges of a quarter, at least about
/// [`TAIL_PIECE`] each, so that the slowest stream of the end holds up a piece, not a block.
/// (An object within one wave is left whole: `cp -r` of many such would quadruple its
/// requests, while other objects' blocks keep the link busy.) Measured on lfp (1 GiB, 200 ms,
/// 5 MiB blocks): the last wave's blocks ended over 1.1 s, the link idle for most of it; a
/// download took 11.63 s in quarters, 11.79 s whole and in halves (medians of 3).
fn tail_pieces(i: usize, count: usize, wave: usize, len: u64) -> u64 {
    match count > wave && i + wave >= count {
        true => (len / TAIL_PIECE).clamp(1, TAIL_PIECES),
        false => 1,
    }
}

/// Pieces a block of the last wave is read in, at most.
const TAIL_PIECES: u64 = 4;
/// Smallest piece: below it a request's round trip costs more than its bytes.
const TAIL_PIECE: u64 = 1 << 20;

/// The digest an object's reader can check, if the source vouches for one under `plan`: the
/// cheapest ([`ferry_store::Store::read_digest`]), else the one ferry's writes are compared
/// with. Both are the store's answer: one that cannot be checked under `plan` (a checksum of
/// parts, for an object read whole) must not hide the other.
pub(crate) fn expected_digest(
    src: &SharedStore, info: &ObjectInfo, plan: BlockPlan,
) -> Option<String> {
    let written_with = BlockPlan::recorded(info);
    let single = plan.count(info.size) <= 1;
    let usable = |digest: &String| {
        ferry_store::DigestKind::of(digest).any_blocks()
            || written_with == Some(plan)
            || (single && !digest.contains('-'))
    };
    src.read_digest(info)
        .filter(usable)
        .or_else(|| src.digest(info).filter(usable))
}

pub(crate) fn meta_with(plan: BlockPlan, digest: Option<&str>) -> Meta {
    let mut m = Meta::new();
    m.insert(META_BLOCKS.into(), plan.encode());
    if let Some(d) = digest {
        m.insert(META_DIGEST.into(), d.into());
    }
    m
}

/// Metadata for an object of `plan` written whole to `dst`: with the digest `dst` records
/// for such objects ([`ferry_store::Store::whole_digest_kind`]), composed from `sums`.
pub(crate) fn whole_meta(dst: &SharedStore, plan: BlockPlan, sums: &[BlockSum]) -> Meta {
    let got = dst
        .whole_digest_kind()
        .and_then(|k| digest::compose(k, sums, true));
    meta_with(plan, got.as_deref())
}

impl Engine {
    /// Copies `src_key` of `src` to `dst_key` of `dst`, starting from `known`, what the
    /// source's HEAD already said of it, if anything. The destination appears whole, checked,
    /// or not at all.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn copy(
        &self, src: &SharedStore, src_key: &str, known: Option<&ObjectInfo>, dst: &SharedStore,
        dst_key: &str, class: Class, progress: &dyn Progress,
    ) -> Result<u64> {
        let (info, first) = match known {
            // Described already: the blocks' requests go out at once (asking again would cost
            // a round trip; its first bytes would save none).
            Some(info) => (info.clone(), Bytes::new()),
            None => self.describe(src, src_key, class, false).await?,
        };
        let first = &first;
        let size = info.size;
        progress.add_total(size);
        let plan = match BlockPlan::recorded(&info) {
            // Reading in the blocks the object was written with lets the digest be checked.
            Some(p) if self.cfg.block_size.is_none() && p.fits(size, dst.limits()) => p,
            _ => BlockPlan::for_size(size, dst.limits(), self.cfg.block_size),
        };
        let expect = expected_digest(src, &info, plan);
        let blocks = plan.blocks(size);

        if blocks.len() <= 1 {
            // Memory first: a slot is held only by a request that can go at once, and only
            // while it is on the wire.
            let _mem = self.sched.reserve(size).await;
            let what = format!("read {src_key}");
            let data = self
                .read_after(src, src_key, class, first, 0..size, &what)
                .await?;
            let need = Need::for_copy(expect.as_deref(), dst.whole_digest_kind());
            let sums = [sum_of(&data, need).await];
            check(expect.as_deref(), &sums, true, src_key)?;
            let meta = whole_meta(dst, plan, &sums);
            let what = format!("write {dst_key}");
            self.write_to(dst, class, &what, size, || {
                dst.put(dst_key, data.clone(), &meta)
            })
            .await?;
            self.sched.record(size);
            progress.advance(size);
            self.finished(size, plan, expect.is_some());
            return Ok(size);
        }

        let count = blocks.len();
        let read = |i: usize, off: u64, len: u64| async move {
            // Blocks on the wire at once: the limit, or fewer when memory holds them back.
            let wave = self
                .sched
                .limit()
                .min(self.sched.memory() / len.max(1) as usize);
            let pieces = match src.is_local() {
                true => 1,
                false => tail_pieces(i, count, wave, len),
            };
            // Pieces are put together in a buffer of their own: twice the block meanwhile.
            let mem = self.sched.reserve(len * pieces.min(2)).await;
            let what = format!("read {src_key} block {i}");
            let step = len.div_ceil(pieces);
            let parts = (0..pieces).map(|p| {
                let a = off + p * step;
                let b = (a + step).min(off + len);
                self.read_after(src, src_key, class, first, a..b, &what)
            });
            let mut parts = futures::future::try_join_all(parts).await?;
            let data = match parts.len() {
                1 => parts.pop().expect("one part"),
                _ => crate::buffer::concat(&parts.iter().map(|p| &p[..]).collect::<Vec<_>>()),
            };
            Ok((data, mem))
        };
        self.upload_blocks(
            dst,
            dst_key,
            plan,
            size,
            expect.as_deref(),
            src_key,
            class,
            progress,
            src.is_local().then_some(READ_AHEAD),
            None,
            read,
        )
        .await?;
        self.finished(size, plan, expect.is_some());
        Ok(size)
    }

    /// What `key` of `src` is, with its first bytes when the store is remote: a small object
    /// comes whole in the request that describes it, and a large one's first block starts
    /// there (a HEAD, then a GET, would be two round trips). `light` when the caller takes
    /// no more than that first read (a record of a few KiB): the request then goes in the
    /// light lane ([`Engine::request_light`]).
    pub(crate) async fn describe(
        &self, src: &SharedStore, key: &str, class: Class, light: bool,
    ) -> Result<(ObjectInfo, Bytes)> {
        let what = format!("head {key}");
        if src.is_local() {
            let info = self.retry(&what, 0, || src.head(key)).await?;
            return Ok((info, Bytes::new()));
        }
        let _mem = self.sched.reserve(FIRST_READ).await;
        let op = || src.head_and_read(key, 0..FIRST_READ);
        match light {
            true => self.request_light(class, &what, FIRST_READ, op).await,
            false => self.request_to(src, class, &what, FIRST_READ, op).await,
        }
    }

    /// `range` of `key`, asking the store only for what `first`, the object's first bytes,
    /// does not hold.
    pub(crate) async fn read_after(
        &self, src: &SharedStore, key: &str, class: Class, first: &Bytes, range: Range<u64>,
        what: &str,
    ) -> Result<Bytes> {
        let held = (first.len() as u64).clamp(range.start, range.end);
        if held == range.end {
            return Ok(first.slice(range.start as usize..range.end as usize));
        }
        let rest = self
            .request_to(src, class, what, range.end - held, || {
                src.get_range(key, held..range.end)
            })
            .await?;
        if held == range.start {
            return Ok(rest);
        }
        Ok(crate::buffer::concat(&[
            &first[range.start as usize..held as usize],
            &rest,
        ]))
    }

    /// Writes the blocks of `plan` for `size` bytes to `dst_key` as one upload (the one
    /// `started` began, or a new one), each got from `block(i, offset, len)` with whatever
    /// must live while it is sent (its memory), then commits it, checked against `expect`,
    /// the digest of `src_name`; aborts on failure.
    ///
    /// A block is got and hashed before its request takes a slot, so that a slot is a request
    /// on the wire. `ahead` bounds the blocks got and waiting for a slot, for a `block` that
    /// reads without a request of its own (local disk): else they would fill the whole memory
    /// budget while the link drains them at its pace.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn upload_blocks<F, Fut, G>(
        &self, dst: &SharedStore, dst_key: &str, plan: BlockPlan, size: u64, expect: Option<&str>,
        src_name: &str, class: Class, progress: &dyn Progress, ahead: Option<usize>,
        started: Option<Started>, block: F,
    ) -> Result<()>
    where
        F: Fn(usize, u64, u64) -> Fut,
        Fut: std::future::Future<Output = Result<(Bytes, G)>>,
    {
        let blocks = plan.blocks(size);
        let up = &self.begun(dst, dst_key, size, plan, started).await?;
        let need = Need::for_copy(expect, dst.digest_kind());
        let block = &block;
        let ahead = ahead.map(tokio::sync::Semaphore::new);
        let ahead = &ahead;
        let sent = futures::stream::iter(blocks.iter().copied().enumerate())
            .map(|(i, (off, len))| async move {
                let waiting = match ahead {
                    Some(s) => Some(s.acquire().await.expect("never closed")),
                    None => None,
                };
                let (data, _held) = block(i, off, len).await?;
                let sum = sum_of(&data, need).await;
                let _slot = self.slot_for(dst, class, Way::Up).await;
                drop(waiting);
                let what = format!("write {dst_key} block {i}");
                let id = self
                    .retry(&what, len, || dst.put_block(up, i, off, data.clone()))
                    .await?;
                self.sched.record(len);
                progress.advance(len);
                Ok::<_, Error>((id, sum))
            })
            .buffered(blocks.len())
            .try_collect::<Vec<_>>()
            .await;
        let finished = match sent {
            Ok(parts) => {
                self.commit(dst, up, parts, plan, size, expect, src_name)
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = finished {
            self.abort(dst, up).await;
            return Err(e);
        }
        Ok(())
    }

    /// Completes an upload after checking that every block of `plan` for `size` bytes is there
    /// and that the source digest holds, then checks what the store made.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn commit(
        &self, dst: &SharedStore, up: &Upload, parts: Vec<(BlockId, BlockSum)>, plan: BlockPlan,
        size: u64, expect: Option<&str>, src_name: &str,
    ) -> Result<()> {
        let want = plan.count(size) as usize;
        if parts.len() != want {
            return Err(Error::Permanent(format!(
                "{}: {} of {want} blocks sent; not committing an incomplete object",
                up.key,
                parts.len()
            )));
        }
        let (ids, sums): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        check(expect, &sums, false, src_name)?;
        let got = dst
            .digest_kind()
            .and_then(|k| digest::compose(k, &sums, false));
        let meta = meta_with(plan, got.as_deref());
        let what = format!("complete {}", up.key);
        let done = self
            .retry(&what, 0, || dst.complete_upload(up, ids.clone(), &meta))
            .await;
        let stored = match done {
            Ok(digest) => digest,
            // A retried completion finds its upload already completed: look at the object.
            Err(Error::NotFound(_)) => {
                let info = dst.head(&up.key).await?;
                if info.size != size {
                    return Err(Error::Checksum(format!(
                        "{}: the store holds {} bytes, ferry sent {size}",
                        up.key, info.size
                    )));
                }
                dst.digest(&info)
            }
            Err(e) => return Err(e),
        };
        self.delete_leftovers(dst, up, &ids).await;
        match (stored, got) {
            (Some(stored), Some(got)) if stored != got => {
                let _ = dst.delete(&up.key).await;
                Err(Error::Checksum(format!(
                    "{}: the store assembled {stored}, ferry sent {got}; removed",
                    up.key
                )))
            }
            _ => Ok(()),
        }
    }

    /// Deletes what a completed upload left behind (GCS's parts), many at once, each retried.
    /// One that stays is said, not failed: the object is whole, and the store's listings
    /// leave such parts out.
    async fn delete_leftovers(&self, dst: &SharedStore, up: &Upload, ids: &[BlockId]) {
        let names = dst.leftovers(up, ids);
        let failed: Vec<Error> = futures::stream::iter(names)
            .map(|name| async move {
                let what = format!("delete {name}");
                self.retry(&what, 0, || dst.delete(&name)).await.err()
            })
            .buffer_unordered(LEFTOVER_DELETES)
            .filter_map(futures::future::ready)
            .collect()
            .await;
        if let Some(e) = failed.first() {
            tracing::warn!(key = %up.key, left = failed.len(), error = %e,
                "could not delete every part of a completed upload");
        }
    }

    pub(crate) async fn abort(&self, dst: &SharedStore, up: &Upload) {
        let what = format!("abort {}", up.key);
        // Outlast a short outage: an abandoned multipart upload costs storage until removed.
        let policy = crate::RetryPolicy {
            attempts: 8,
            ..self.cfg.retry
        };
        let abort = policy.run(&what, 0, |_, _| {}, || dst.abort_upload(up));
        if let Ok(Err(e)) | Err(e) = tokio::time::timeout(ABORT_TIMEOUT, abort)
            .await
            .map_err(|_| Error::Transient("abort timed out".into()))
        {
            tracing::warn!(key = %up.key, error = %e, "could not abort upload; the store will expire it");
        }
    }
}

/// Checks the blocks read (`sums`) against the digest the source vouches for, if any.
pub(crate) fn check(
    expect: Option<&str>, sums: &[BlockSum], single: bool, name: &str,
) -> Result<()> {
    let Some(e) = expect else { return Ok(()) };
    match digest::compose(ferry_store::DigestKind::of(e), sums, single) {
        Some(got) if got == e => Ok(()),
        Some(got) => Err(Error::Checksum(format!(
            "{name}: read data has digest {got}, the store says {e}"
        ))),
        None => Err(Error::Permanent(format!(
            "{name}: the digest {e} was not computed (ferry bug)"
        ))),
    }
}

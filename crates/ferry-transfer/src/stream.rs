//! Streams of unknown length in (`pg_dump | ferry cp - s3://...`) and ordered streams out.

use std::sync::Arc;

use bytes::Bytes;
use ferry_store::{Error, Result, Upload};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::copy::{check, expected_digest, whole_meta};
use crate::digest::{BlockSum, Need};
use crate::started::Started;
use crate::{sum_of, BlockPlan, Class, Engine, NoProgress, Progress, SharedStore};

/// Reads a block of `len` bytes, or fewer at the end, into a pooled buffer.
async fn read_block<R: AsyncRead + Unpin>(r: &mut R, len: u64) -> Result<Bytes> {
    let mut buf = crate::buffer::with_capacity(len as usize);
    while (buf.len() as u64) < len {
        let n = r
            .read_buf(&mut buf)
            .await
            .map_err(|e| Error::Permanent(format!("read input: {e}")))?;
        if n == 0 {
            break;
        }
    }
    Ok(crate::buffer::bytes(buf))
}

impl Engine {
    /// Uploads everything `reader` yields to `key`, in blocks, without knowing the length in
    /// advance; buffered bytes stay within the memory budget.
    pub(crate) async fn upload<R: AsyncRead + Unpin>(
        &self, mut reader: R, dst: &SharedStore, key: &str, class: Class,
        progress: Arc<dyn Progress>,
    ) -> Result<u64> {
        let plan = BlockPlan::for_stream(dst.limits(), self.cfg.block_size);
        let mem = self.sched.reserve(plan.block_len(0)).await;
        let first = read_block(&mut reader, plan.block_len(0)).await?;
        let mut next_mem = self.sched.reserve(plan.block_len(1)).await;
        let mut next = if first.len() as u64 == plan.block_len(0) {
            read_block(&mut reader, plan.block_len(1)).await?
        } else {
            Bytes::new()
        };
        if next.is_empty() {
            drop(next_mem);
            let size = first.len() as u64;
            progress.add_total(size);
            self.put_whole(first, dst, key, plan, class).await?;
            drop(mem);
            progress.advance(size);
            self.finished(size, plan, false);
            return Ok(size);
        }

        // Its blocks are not counted yet: no connections are opened ahead for them.
        let up = self.begin(dst, key, plan, 0).await?;
        let mut tasks = JoinSet::new();
        let (mut idx, mut off) = (0usize, 0u64);
        let mut block = (first, mem);
        let mut parts = Vec::new();
        let result: Result<u64> = async {
            loop {
                let (data, mem) = block;
                let len = data.len() as u64;
                progress.add_total(len);
                tasks.spawn(self.clone().send_block(
                    dst.clone(),
                    up.clone(),
                    idx,
                    off,
                    data,
                    mem,
                    class,
                    progress.clone(),
                ));
                idx += 1;
                off += len;
                // Reap finished blocks as we go: a failure stops reading early.
                while let Some(done) = tasks.try_join_next() {
                    parts.push(done.map_err(|e| Error::Permanent(format!("block task: {e}")))??);
                }
                if next.is_empty() {
                    break;
                }
                let last = (next.len() as u64) < plan.block_len(idx as u64);
                block = (std::mem::take(&mut next), next_mem);
                if last {
                    // The short block is the last one: send it without reading further.
                    next_mem = self.sched.reserve(1).await;
                    continue;
                }
                next_mem = self.sched.reserve(plan.block_len(idx as u64 + 1)).await;
                next = read_block(&mut reader, plan.block_len(idx as u64 + 1)).await?;
            }
            Ok(off)
        }
        .await;
        let mut failed = result.err();
        while let Some(done) = tasks.join_next().await {
            match done
                .map_err(|e| Error::Permanent(format!("block task: {e}")))
                .and_then(|r| r)
            {
                Ok(p) => parts.push(p),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            self.abort(dst, &up).await;
            return Err(e);
        }
        parts.sort_by_key(|p| p.0);
        let parts = parts.into_iter().map(|(_, id, sum)| (id, sum)).collect();
        if let Err(e) = self.commit(dst, &up, parts, plan, off, None, key).await {
            self.abort(dst, &up).await;
            return Err(e);
        }
        self.finished(off, plan, false);
        Ok(off)
    }

    /// Uploads `data`, already in memory, to `key` (through the upload `started` began, if
    /// any); its blocks are slices of it, not copies.
    pub(crate) async fn upload_bytes(
        &self, data: Bytes, dst: &SharedStore, key: &str, class: Class, started: Option<Started>,
    ) -> Result<u64> {
        let size = data.len() as u64;
        let plan = BlockPlan::for_size(size, dst.limits(), self.cfg.block_size);
        if plan.count(size) <= 1 {
            if let Some(s) = started {
                self.abandon(dst, s).await;
            }
            self.put_whole(data, dst, key, plan, class).await?;
            self.sched.record(size);
            self.finished(size, plan, false);
            return Ok(size);
        }
        let slice = |_: usize, off: u64, len: u64| {
            let block = data.slice(off as usize..(off + len) as usize);
            async move { Ok((block, ())) }
        };
        self.upload_planned(dst, key, plan, size, class, started, slice)
            .await
    }

    /// Sends the `size` bytes of `key` in the blocks of `plan`, each from `block` with what
    /// it holds until answered, as one upload (the one `started` began, or a new one).
    #[allow(clippy::too_many_arguments)]
    async fn upload_planned<F, Fut, G>(
        &self, dst: &SharedStore, key: &str, plan: BlockPlan, size: u64, class: Class,
        started: Option<Started>, block: F,
    ) -> Result<u64>
    where
        F: Fn(usize, u64, u64) -> Fut,
        Fut: std::future::Future<Output = Result<(Bytes, G)>>,
    {
        let (progress, ahead) = (&NoProgress, None);
        self.upload_blocks(
            dst, key, plan, size, None, key, class, progress, ahead, started, block,
        )
        .await?;
        self.finished(size, plan, false);
        Ok(size)
    }

    /// [`Engine::upload_bytes`] for a caller that counts `data` in a memory budget of its own
    /// with `held`: each block is copied out on its own (slices of `data` would keep all of
    /// it alive to the end), `data` and what `held` counts beyond the blocks go at once, and
    /// each block's share returns when the store has answered it, not when the upload is
    /// completed: the completion's round trip holds none (nor the wait for the upload
    /// `started` began, when given). An object sent whole holds its size until stored.
    pub(crate) async fn upload_held(
        &self, data: Bytes, dst: &SharedStore, key: &str, class: Class,
        mut held: crate::scheduler::Memory, started: Option<Started>,
    ) -> Result<u64> {
        let size = data.len() as u64;
        let plan = BlockPlan::for_size(size, dst.limits(), self.cfg.block_size);
        let blocks = plan.blocks(size);
        if blocks.len() <= 1 {
            drop(held.split(held.num_permits() - data.len().min(held.num_permits())));
            return self.upload_bytes(data, dst, key, class, started).await;
        }
        let parts: Vec<_> = blocks
            .iter()
            .map(|&(off, len)| {
                let block = Bytes::copy_from_slice(&data[off as usize..(off + len) as usize]);
                let share = held.split((len as usize).min(held.num_permits()));
                Some((block, share))
            })
            .collect();
        drop((data, held));
        let parts = std::sync::Mutex::new(parts);
        let take = |i: usize, _: u64, _: u64| {
            let part = parts
                .lock()
                .expect("not poisoned")
                .get_mut(i)
                .and_then(Option::take);
            async move { part.ok_or_else(|| Error::Permanent(format!("block {i} taken twice"))) }
        };
        self.upload_planned(dst, key, plan, size, class, started, take)
            .await
    }

    /// Writes `data` to `key` in one request, with the digest `dst` keeps.
    async fn put_whole(
        &self, data: Bytes, dst: &SharedStore, key: &str, plan: BlockPlan, class: Class,
    ) -> Result<()> {
        let sums = [sum_of(&data, Need::for_copy(None, dst.whole_digest_kind())).await];
        let meta = whole_meta(dst, plan, &sums);
        let what = format!("write {key}");
        self.write_to(dst, class, &what, data.len() as u64, || {
            dst.put(key, data.clone(), &meta)
        })
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn send_block(
        self, dst: SharedStore, up: Upload, idx: usize, off: u64, data: Bytes,
        _mem: crate::scheduler::Memory, class: Class, progress: Arc<dyn Progress>,
    ) -> Result<(usize, ferry_store::BlockId, BlockSum)> {
        let len = data.len() as u64;
        let sum = sum_of(&data, Need::for_copy(None, dst.digest_kind())).await;
        let what = format!("write {} block {idx}", up.key);
        let id = self
            .write_to(&dst, class, &what, len, || {
                dst.put_block(&up, idx, off, data.clone())
            })
            .await?;
        self.sched.record(len);
        progress.advance(len);
        Ok((idx, id, sum))
    }

    /// Writes object `key` to `writer` in order, fetching blocks ahead in parallel; the content
    /// is checked against the store's digest at the end, when the store vouches for one. An
    /// object the store says is larger than `max` is refused before a byte of it is read.
    pub(crate) async fn download<W: AsyncWrite + Unpin>(
        &self, src: &SharedStore, key: &str, mut writer: W, class: Class, progress: &dyn Progress,
        max: u64,
    ) -> Result<u64> {
        let light = max <= crate::LIGHT_BYTES;
        let (info, first) = self.describe(src, key, class, light).await?;
        let first = &first;
        if info.size > max {
            return Err(Error::Checksum(format!(
                "{key}: {} bytes, more than the {max} it can hold (damaged or planted)",
                info.size
            )));
        }
        progress.add_total(info.size);
        let any = ferry_store::Limits {
            min_block: 1,
            max_block: u64::MAX,
            max_blocks: u64::MAX,
        };
        let plan = match BlockPlan::recorded(&info) {
            Some(p) if self.cfg.block_size.is_none() => p,
            _ => BlockPlan::for_size(info.size, any, self.cfg.block_size),
        };
        let expect = expected_digest(src, &info, plan);
        let blocks = plan.blocks(info.size);
        let single = blocks.len() <= 1;
        let need = Need::for_copy(expect.as_deref(), None);
        let mut fetched = futures::stream::iter(blocks)
            .map(|(off, len)| async move {
                let mem = self.sched.reserve(len).await;
                let what = format!("read {key}");
                let data = self
                    .read_after(src, key, class, first, off..off + len, &what)
                    .await?;
                self.sched.record(len);
                // Hashed here, in parallel, rather than in the ordered writing loop below.
                let sum = sum_of(&data, need).await;
                Ok::<_, Error>((data, sum, mem))
            })
            .buffered(1024);
        let mut sums = Vec::new();
        let mut size = 0u64;
        while let Some(block) = fetched.next().await {
            let (data, sum, _mem) = block?;
            sums.push(sum);
            writer
                .write_all(&data)
                .await
                .map_err(|e| Error::Permanent(format!("write output: {e}")))?;
            size += data.len() as u64;
            progress.advance(data.len() as u64);
        }
        writer
            .flush()
            .await
            .map_err(|e| Error::Permanent(format!("write output: {e}")))?;
        check(expect.as_deref(), &sums, single, key)?;
        self.finished(size, plan, expect.is_some());
        Ok(size)
    }
}

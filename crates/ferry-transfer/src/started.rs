//! Uploads started ahead of their bytes: a caller that will know its object's size before it
//! may send it (the WAL push, waiting for the existence check) starts the upload meanwhile,
//! and its round trip overlaps that wait instead of following it.

use ferry_store::{Error, Result, Upload};
use tokio::task::JoinHandle;

use crate::copy::meta_with;
use crate::{BlockPlan, Engine, SharedStore};

/// A multipart upload being started for an object of known size (see
/// [`Remote::start_upload`]). Hand it to the upload of that object, or give it back with
/// [`Remote::abandon`]; merely dropped, it leaves an unfinished upload that the store's
/// lifecycle rules remove, as a crash does.
///
/// [`Remote::start_upload`]: crate::Remote::start_upload
/// [`Remote::abandon`]: crate::Remote::abandon
#[derive(Debug)]
pub struct Started {
    key: String,
    size: u64,
    task: JoinHandle<Result<Upload>>,
}

impl Engine {
    /// Starts the upload of `size` bytes to `key` in a task of its own; `None` when one
    /// request will carry them whole (there is nothing to start).
    pub(crate) fn start_ahead(&self, dst: &SharedStore, key: &str, size: u64) -> Option<Started> {
        let plan = BlockPlan::for_size(size, dst.limits(), self.cfg.block_size);
        let blocks = plan.count(size) as usize;
        if blocks <= 1 {
            return None;
        }
        let (engine, dst, owned) = (self.clone(), dst.clone(), key.to_string());
        let task = tokio::spawn(async move { engine.begin(&dst, &owned, plan, blocks).await });
        Some(Started {
            key: key.to_string(),
            size,
            task,
        })
    }

    /// Starts the upload of `blocks` blocks of `plan` to `key`. The first blocks go out as
    /// soon as it has started, each on a connection: those are opened meanwhile when the
    /// object fills more than a wave (a WAL segment does not, and wal-push is a process per
    /// segment).
    pub(crate) async fn begin(
        &self, dst: &SharedStore, key: &str, plan: BlockPlan, blocks: usize,
    ) -> Result<Upload> {
        let wave = self.sched.limit();
        if blocks > wave {
            self.warm(dst, key, wave);
        }
        let what = format!("start upload of {key}");
        let meta = meta_with(plan, None);
        self.retry(&what, 0, || dst.start_upload(key, &meta)).await
    }

    /// The upload `started` began, for the `size` bytes of `key` that `plan` cuts in
    /// `blocks`; started now when there is none.
    pub(crate) async fn begun(
        &self, dst: &SharedStore, key: &str, size: u64, plan: BlockPlan, started: Option<Started>,
    ) -> Result<Upload> {
        let blocks = plan.count(size) as usize;
        let Some(s) = started else {
            return self.begin(dst, key, plan, blocks).await;
        };
        if s.key != key || s.size != size {
            let (what, was) = (
                format!("{key} ({size} bytes)"),
                format!("{} ({})", s.key, s.size),
            );
            self.abandon(dst, s).await;
            return Err(Error::Permanent(format!(
                "upload of {what} handed the upload started for {was} (ferry bug)"
            )));
        }
        s.task
            .await
            .map_err(|e| Error::Permanent(format!("start upload of {key}: {e}")))?
    }

    /// Aborts what `started` began, once it has: nothing of it stays in the store.
    pub(crate) async fn abandon(&self, dst: &SharedStore, started: Started) {
        if let Ok(Ok(up)) = started.task.await {
            self.abort(dst, &up).await;
        }
    }
}

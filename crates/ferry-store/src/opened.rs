//! An object opened once and read in parts: a file, whose every part comes from the one open
//! file, so that an object replaced under its key meanwhile is never mixed into the parts
//! (see [`crate::Store::open`]).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use crate::{Error, Result};

/// An open object (see [`crate::Store::open`]).
#[derive(Debug, Clone)]
pub struct Opened {
    file: Arc<File>,
    size: u64,
    name: Arc<str>,
}

impl Opened {
    /// `file`, of `size` bytes when opened; `name` for messages.
    pub(crate) fn new(file: File, size: u64, name: &str) -> Opened {
        Opened {
            file: Arc::new(file),
            size,
            name: name.into(),
        }
    }

    /// Its size when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The bytes of `range`, which must lie within [`Opened::size`]; read off the async
    /// workers. A file cut shorter since it was opened is an error, not a short read.
    pub async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut buf = crate::buffer::take((range.end - range.start) as usize);
            me.file
                .read_exact_at(&mut buf, range.start)
                .map_err(|e| Error::io(&*me.name, e))?;
            Ok(buf.freeze())
        })
        .await
        .map_err(|e| Error::Permanent(format!("local I/O task failed: {e}")))?
    }
}

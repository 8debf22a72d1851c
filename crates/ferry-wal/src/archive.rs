//! The WAL archive in a store: one object per WAL file under `<root>/wal/`, the cluster it
//! belongs to in `wal/cluster.json`, and drop-policy gaps in `wal/gaps/`. With a [`WalKey`]
//! every file pushed is encrypted; `cluster.json` and gap records stay plaintext, as they
//! hold no WAL content (a system identifier, a segment size, a file name and a reason).

use std::sync::Arc;

use bytes::Bytes;
use ferry_transfer::{Class, NoProgress, Remote, Started};
use ferry_transfer::{Error, ObjectInfo, Result};
use serde::{Deserialize, Serialize};
use tokio::sync::{OnceCell, OwnedSemaphorePermit};

use crate::envelope::{self, Cipher, Header, WalKey, HEADER_LEN};
use crate::name::{Kind, WalName};
use crate::page;

/// Which cluster an archive belongs to; written by the first push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// Layout version of the archive.
    pub format: u32,
    /// PostgreSQL's system identifier (a string: it does not fit JSON's doubles).
    pub system_id: String,
    /// WAL segment size in bytes.
    pub seg_size: u64,
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Stored now; `bytes` went to the store.
    Stored {
        /// Checksum and length of the original.
        header: Header,
        /// Archived size (header and compressed payload).
        bytes: u64,
    },
    /// The archive already held this file with the same content.
    AlreadyArchived(Header),
}

impl Pushed {
    /// The original's checksum and length.
    pub fn header(&self) -> &Header {
        match self {
            Pushed::Stored { header, .. } | Pushed::AlreadyArchived(header) => header,
        }
    }
}

/// What a push concluded once the archive's copy was judged.
enum Prepared {
    /// Nothing to store: the archive holds this content already.
    Done(Pushed),
    /// Sealed and not in the archive: to be stored.
    Sealed {
        /// Checksum and length of the original.
        header: Header,
        /// The sealed object.
        obj: Vec<u8>,
    },
}

/// A WAL file sealed for the archive, its original kept until the archive's copy is judged.
struct Sealing {
    header: Header,
    obj: Vec<u8>,
    data: Vec<u8>,
}

/// A gap the drop policy left in the archive: PITR cannot cross it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// The WAL file that was acknowledged to PostgreSQL without being archived.
    pub name: String,
    /// Why, with the queue figures at the time.
    pub reason: String,
    /// When, as seconds since the Unix epoch.
    pub unix_time: u64,
}

/// The archive for one cluster.
#[derive(Debug)]
pub struct Archive {
    store: Remote,
    root: String,
    level: i32,
    key: Option<WalKey>,
    cluster: OnceCell<Cluster>,
    /// Taken by a claim that found no record, to write it once.
    claiming: tokio::sync::Mutex<()>,
}

impl Archive {
    /// The archive under `root` (a key prefix, possibly empty) of `store`; WAL is compressed
    /// with zstd at `level` (0: not compressed). With `key`, every file pushed is encrypted,
    /// and fetches decrypt (plaintext objects, archived before the repository was encrypted,
    /// are still read).
    pub fn with_key(store: Remote, root: &str, level: i32, key: Option<WalKey>) -> Arc<Self> {
        Arc::new(Self {
            // PostgreSQL waits on every WAL call (archive_command, restore_command): they go
            // before bulk work sharing the engine. This is where that is decided.
            store: store.with_class(Class::Urgent),
            root: root.trim_matches('/').to_string(),
            level,
            key,
            cluster: OnceCell::new(),
            claiming: tokio::sync::Mutex::new(()),
        })
    }

    /// True when pushes encrypt.
    pub fn encrypted(&self) -> bool {
        self.key.is_some()
    }

    fn key(&self, rel: &str) -> String {
        if self.root.is_empty() {
            format!("wal/{rel}")
        } else {
            format!("{}/wal/{rel}", self.root)
        }
    }

    /// Opens connections to the store without waiting, for a program about to move many
    /// files at once (see [`Remote::warm`]).
    pub fn warm(&self) {
        self.store.warm(&self.key("cluster.json"));
    }

    /// Where the archive lives, for messages.
    pub fn url(&self) -> String {
        let base = self.store.url();
        let base = base.trim_end_matches('/');
        if self.root.is_empty() {
            base.to_string()
        } else if base.is_empty() {
            format!("/{}", self.root)
        } else {
            format!("{base}/{}", self.root)
        }
    }

    /// A small plaintext record (`cluster.json`, a gap): a few hundred bytes, read up to
    /// 64 KiB, not up to a WAL file's bound.
    async fn read_record(&self, key: &str) -> Result<Vec<u8>> {
        self.store.read(key, 64 << 10).await
    }

    /// Writes `value` as JSON to `wal/rel`.
    async fn put_json<T: Serialize>(&self, rel: &str, value: &T) -> Result<()> {
        let body = serde_json::to_vec_pretty(value).expect("serializable");
        let key = self.key(rel);
        self.store
            .upload(&body[..], &key, Arc::new(NoProgress))
            .await?;
        Ok(())
    }

    /// The cluster this archive belongs to, if anything was pushed yet.
    pub async fn cluster(&self) -> Result<Option<Cluster>> {
        if let Some(c) = self.cluster.get() {
            return Ok(Some(c.clone()));
        }
        match self.read_record(&self.key("cluster.json")).await {
            Ok(b) => {
                let c: Cluster = serde_json::from_slice(&b)
                    .map_err(|e| Error::Invalid(format!("{}/wal/cluster.json: {e}", self.url())))?;
                // Unauthenticated: a segment size PostgreSQL cannot have would divide by zero
                // or walk past every name further on.
                if !(c.seg_size.is_power_of_two() && ((1 << 20)..=(1 << 30)).contains(&c.seg_size))
                {
                    return Err(Error::Invalid(format!(
                        "{}/wal/cluster.json: segment size {} is not one PostgreSQL has \
                         (a power of two from 1 MiB to 1 GiB)",
                        self.url(),
                        c.seg_size
                    )));
                }
                let _ = self.cluster.set(c.clone());
                Ok(Some(c))
            }
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Claims the archive for the cluster of `seg`, or refuses a segment of another cluster.
    async fn claim(&self, seg: page::SegmentHeader) -> Result<()> {
        let mine = Cluster {
            format: 1,
            system_id: seg.system_id.to_string(),
            seg_size: seg.seg_size,
        };
        let found = match self.cluster().await? {
            Some(c) => Some(c),
            None => {
                // One writer of the record: the first segments of a bulk load, prepared at
                // once, would each write it. (Reads stay parallel: a store that fails fails
                // them all at once, not one after the other.)
                let _one = self.claiming.lock().await;
                match self.cluster.get() {
                    Some(c) => Some(c.clone()),
                    None => {
                        self.put_json("cluster.json", &mine).await?;
                        let _ = self.cluster.set(mine.clone());
                        None
                    }
                }
            }
        };
        match found {
            Some(c) if c != mine => Err(Error::Invalid(format!(
                "archive {} belongs to PostgreSQL cluster {} (segment size {}), but this WAL \
                 comes from cluster {} (segment size {}): give each cluster its own --repo",
                self.url(),
                c.system_id,
                c.seg_size,
                mine.system_id,
                mine.seg_size
            ))),
            _ => Ok(()),
        }
    }

    /// The header of the archived `name`, or `NotFound`.
    pub async fn peek(&self, name: &WalName) -> Result<Header> {
        let key = self.key(&name.key());
        let head = self.store.get_range(&key, 0..HEADER_LEN as u64).await;
        match head {
            Ok(b) => Header::parse(&b, &format!("{}/wal/{}", self.url(), name.key())),
            Err(Error::NotFound(m)) => Err(Error::NotFound(m)),
            // Shorter than a header: present but corrupt, and a push may replace it.
            Err(e) => match self.store.head(&key).await {
                Ok(info) if info.size < HEADER_LEN as u64 => Err(Error::Checksum(format!(
                    "{}/wal/{}: corrupted in the archive: truncated to {} bytes",
                    self.url(),
                    name.key(),
                    info.size
                ))),
                _ => Err(e),
            },
        }
    }

    /// Archives `data` as `name`. Succeeds without writing when the archive already holds the
    /// same content; refuses to replace different content.
    pub async fn push(&self, name: &WalName, data: Vec<u8>) -> Result<Pushed> {
        self.push_read(name, async { Ok((data, None)) }).await
    }

    /// [`Archive::push`] of the file `read` yields, with what it holds of the caller's memory
    /// budget (twice the file: the original and its sealed copy). The existence check goes
    /// out before `read` is awaited (it may wait its turn for memory), the upload is started
    /// as soon as the file is sealed, while that check may still be out, the original is
    /// dropped once the check has answered, and each block's share of `held` returns as the
    /// store answers that block.
    pub async fn push_read<R>(&self, name: &WalName, read: R) -> Result<Pushed>
    where
        R: std::future::Future<Output = Result<(Vec<u8>, Option<OwnedSemaphorePermit>)>>,
    {
        let sealing = async {
            let (data, held) = read.await?;
            let (sealing, started) = self.seal(name, data).await?;
            Ok::<_, Error>((sealing, held, started))
        };
        // The existence check, the ownership check, compression and the upload's start
        // overlap: a sync push (a new process per segment) pays their round trips once, not
        // in turn, and the agent's memory is not held while the existence check goes out.
        let (existing, sealed) = tokio::join!(self.peek(name), sealing);
        let (sealing, held, started) = sealed?;
        let verdict = self.judge(name, existing, sealing).await;
        let started = match (&verdict, started) {
            (Ok(Prepared::Sealed { .. }), started) => started,
            (_, Some(s)) => {
                self.store.abandon(s).await;
                None
            }
            (_, None) => None,
        };
        match verdict? {
            Prepared::Done(p) => Ok(p),
            Prepared::Sealed { header, obj } => {
                let key = self.key(&name.key());
                let obj = Bytes::from(obj);
                let bytes = match held {
                    Some(held) => self.store.upload_held(obj, &key, held, started).await?,
                    None => self.store.upload_bytes(obj, &key, started).await?,
                };
                Ok(Pushed::Stored { header, bytes })
            }
        }
    }

    /// Checks `data` as a WAL file named `name`, claims the archive for its cluster and seals
    /// it, the claim and compression at once; the upload of the sealed object is started as
    /// soon as it is sealed, ahead of the claim's answer and of the caller's existence check
    /// (a file already archived, a retry or a crash, is rare: that upload is then aborted,
    /// as it is when the claim fails).
    async fn seal(&self, name: &WalName, data: Vec<u8>) -> Result<(Sealing, Option<Started>)> {
        let segment = match name.kind() {
            Kind::Segment | Kind::Partial => Some(page::read(name, &data)?),
            _ => None,
        };
        let claim = async {
            match segment {
                Some(h) => self.claim(h).await,
                None => Ok(()),
            }
        };
        let (level, key, file) = (self.level, self.key.clone(), name.to_string());
        let sealing = async {
            let (header, obj, data) = tokio::task::spawn_blocking(move || {
                envelope::seal(&data, level, &file, key.as_ref()).map(|(h, obj)| (h, obj, data))
            })
            .await
            .map_err(|e| Error::Permanent(format!("compress: {e}")))??;
            let started = self
                .store
                .start_upload(&self.key(&name.key()), obj.len() as u64);
            Ok::<_, Error>((Sealing { header, obj, data }, started))
        };
        let (claimed, sealed) = tokio::join!(claim, sealing);
        let (sealing, started) = sealed?;
        if let Err(e) = claimed {
            if let Some(s) = started {
                self.store.abandon(s).await;
            }
            return Err(e);
        }
        Ok((sealing, started))
    }

    /// What to do with `sealing`, given what the archive holds under `name` (`existing`).
    /// The original is dropped before it returns: a caller holding many files at once holds
    /// the sealed object alone from here on.
    async fn judge(
        &self, name: &WalName, existing: Result<Header>, sealing: Sealing,
    ) -> Result<Prepared> {
        let Sealing { header, obj, data } = sealing;
        match existing {
            // The header speaks only for itself: before PostgreSQL is told the file is safe
            // (and recycles it), the stored copy is read back and checked whole against that
            // header, which matches this content. A second push of one file is rare (a retry,
            // a crash); a damaged copy is replaced.
            Ok(h) if h.same_content(&header) => match self.fetch(name).await {
                Ok(_) => return Ok(Prepared::Done(Pushed::AlreadyArchived(header))),
                Err(Error::Checksum(why)) => {
                    tracing::warn!("{name}: the archived copy is damaged ({why}); replacing it");
                }
                // Gone since it was looked at: stored again below.
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            },
            // Plaintext in an encrypted archive: fetch refuses it, so it is replaced by this
            // sealed copy (whoever can write the store may have planted it).
            Ok(h) if h.cipher == Cipher::None && self.key.is_some() => {}
            // Encrypted, and this push has no key to compare with.
            Ok(h) if h.cipher != header.cipher => {
                match h.describes(&data, name.as_str(), self.key.as_ref()) {
                    Some(true) => return Ok(Prepared::Done(Pushed::AlreadyArchived(header))),
                    Some(false) => return Err(self.differs(name)),
                    None => {
                        return Err(Error::Invalid(format!(
                            "{name} is already in archive {} encrypted, but this push has no \
                             repository key (no ferry-repo marker at --repo?); refusing to \
                             store WAL in plaintext beside it",
                            self.url()
                        )))
                    }
                }
            }
            Ok(_) => return Err(self.differs(name)),
            Err(Error::NotFound(_)) => {}
            // A corrupt archived copy is replaced by a good one.
            Err(Error::Checksum(_)) => {}
            Err(e) => return Err(e),
        }
        // The original is needed no longer: with eight segments in flight, keeping each
        // 16 MiB through its upload doubled the agent's peak RSS (bench/wal.sh, 80 -> 161 MiB).
        drop(data);
        Ok(Prepared::Sealed { header, obj })
    }

    fn differs(&self, name: &WalName) -> Error {
        let why = if self.key.is_some() {
            " (or was encrypted under another repository's key)"
        } else {
            ""
        };
        Error::AlreadyExists(format!(
            "{name} is already in archive {} with different content{why}; refusing to \
             overwrite it (is another cluster archiving to the same --repo?)",
            self.url()
        ))
    }

    /// The original bytes of `name`, checked against their checksum (and decrypted);
    /// `NotFound` when the archive does not hold it.
    /// A segment is bounded by the cluster's segment size once [`Archive::cluster`] has read
    /// it (the prefetch agent does, first): each of the agent's fetches in flight then holds
    /// at most about twice that, not a GiB of whatever was planted at the name.
    pub async fn fetch(&self, name: &WalName) -> Result<Vec<u8>> {
        let key = self.key(&name.key());
        let max_len = match (name.kind(), self.cluster.get()) {
            (Kind::Segment | Kind::Partial, Some(c)) => c.seg_size,
            _ => envelope::MAX_LEN,
        };
        let obj = self
            .store
            .read(&key, envelope::object_bound(max_len))
            .await?;
        let what = format!("{}/wal/{}", self.url(), name.key());
        let (wal_key, file) = (self.key.clone(), name.to_string());
        let (header, data) = tokio::task::spawn_blocking(move || {
            envelope::open(&obj, &what, &file, wal_key.as_ref(), max_len)
        })
        .await
        .map_err(|e| Error::Permanent(format!("decompress: {e}")))??;
        debug_assert!(self.key.is_none() || header.cipher != Cipher::None);
        Ok(data)
    }

    /// Every archived WAL file with its object, sorted by key.
    pub async fn list(&self) -> Result<Vec<(WalName, ObjectInfo)>> {
        let prefix = self.key("");
        let mut out = Vec::new();
        let listing = self.store.list(&prefix).await?;
        for info in listing {
            let rel = &info.key[prefix.len()..];
            if rel.starts_with("gaps/") {
                continue;
            }
            // Only at the place a push puts it: a decoy elsewhere (`wal/x/NAME`) would
            // otherwise fill the hole a deleted segment left, and hide it.
            if let Some(file) = rel.rsplit('/').next() {
                if let Ok(n) = WalName::parse(file) {
                    if rel == n.key() {
                        out.push((n, info));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Records in the archive that `gap.name` was acknowledged without being archived.
    pub async fn record_gap(&self, gap: &Gap) -> Result<()> {
        self.put_json(&format!("gaps/{}", gap.name), gap).await
    }

    /// Every gap recorded in the archive.
    pub async fn gaps(&self) -> Result<Vec<Gap>> {
        let mut out = Vec::new();
        for info in self.store.list(&self.key("gaps/")).await? {
            let b = self.read_record(&info.key).await?;
            out.push(
                serde_json::from_slice(&b)
                    .map_err(|e| Error::Invalid(format!("{}: {e}", info.key)))?,
            );
        }
        Ok(out)
    }
}

//! The repository on a store: the format marker, key files, and encrypted files (config,
//! index, snapshots, locks) named by the BLAKE3 of their stored bytes.

use std::collections::HashMap;
use std::sync::Arc;

use ferry_transfer::{buffer, Error, NoProgress, Remote, Result};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::crypto::{KeyFile, Kind, MasterKey};
use crate::id::Id;
use crate::index::{self, Index};
use crate::lock::Health;

/// The only plaintext object: says what the prefix holds.
const MARKER: &str = "ferry-repo";
/// Most key files a password is tried against.
const MAX_KEYS: usize = 20;
/// The format `init` makes: 2, whose seals bind kind and repository id (docs/format.md).
pub const FORMAT: u32 = 2;

/// The marker's exact text for a format; `check` compares it byte for byte.
pub(crate) fn marker_text(format: u32) -> String {
    format!("ferry repository, format {format} (docs/format.md)\n")
}

/// Settings fixed at `init`, stored encrypted in `config`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// Format version.
    pub version: u32,
    /// Random repository id.
    pub id: Id,
    /// FastCDC minimum chunk size.
    pub chunk_min: u32,
    /// FastCDC average chunk size.
    pub chunk_avg: u32,
    /// FastCDC maximum chunk size.
    pub chunk_max: u32,
    /// Packs are closed once they reach this size.
    pub pack_size: u32,
}

/// An open repository.
#[derive(Debug, Clone)]
pub struct Repo {
    remote: Remote,
    root: String,
    key: MasterKey,
    /// The key file that opened the repository.
    opened_with: Option<Id>,
    /// Local copies of metadata, for stores across a network.
    cache: Option<Cache>,
    /// Settings fixed at init.
    pub config: Config,
    /// The locks this process holds on the repository: index and snapshot files are written
    /// only while none of them is lost.
    held: Arc<std::sync::Mutex<Vec<Arc<Health>>>>,
}

/// Kinds of files [`Repo::load_file`] keeps in the cache: those never rewritten under their
/// name. Lock files change too often to be worth it.
fn cached_kind(kind: &str) -> bool {
    matches!(kind, "index" | "snapshots" | "keys")
}

fn join(root: &str, rel: &str) -> String {
    if root.is_empty() {
        rel.to_string()
    } else {
        format!("{root}/{rel}")
    }
}

/// Parallel reads of small files (index, snapshots, trees) over a high-latency link.
pub(crate) const READ_AHEAD: usize = 32;

impl Repo {
    /// Creates a repository of `format` (1 or 2; [`FORMAT`] unless an older ferry must read
    /// it) under `root`; refuses a prefix that already holds one.
    pub async fn init(remote: Remote, root: &str, password: &[u8], format: u32) -> Result<Repo> {
        if !(1..=FORMAT).contains(&format) {
            return Err(Error::Invalid(format!(
                "repository format {format}: ferry writes formats 1 and {FORMAT}"
            )));
        }
        let root = root.trim_matches('/').to_string();
        let url = show(&remote, &root);
        match remote.head(&join(&root, MARKER)).await {
            Ok(_) => {
                return Err(Error::AlreadyExists(format!(
                    "{url} already holds a ferry repository"
                )))
            }
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        if !remote.list(&join(&root, "keys/")).await?.is_empty() {
            return Err(Error::AlreadyExists(format!(
                "{url} already holds repository keys"
            )));
        }
        let id = Id::of(&rand::random::<[u8; 32]>());
        let key = match format {
            1 => MasterKey::generate(id).format1(),
            _ => MasterKey::generate(id),
        };
        let config = Config {
            version: format,
            id,
            chunk_min: 512 << 10,
            chunk_avg: 1 << 20,
            chunk_max: 8 << 20,
            pack_size: 16 << 20,
        };
        let mut repo = Repo {
            remote,
            root,
            key,
            opened_with: None,
            cache: None,
            config,
            held: Default::default(),
        };
        // Marker last: a half-made repository is not mistaken for one.
        repo.opened_with = Some(repo.add_key(password).await?);
        let cfg = serde_json::to_vec(&repo.config).expect("serializable");
        repo.put(
            &join(&repo.root, "config"),
            repo.key.seal(Kind::Config, &cfg),
        )
        .await?;
        let marker = marker_text(format).into_bytes();
        repo.put(&join(&repo.root, MARKER), marker).await?;
        Ok(repo)
    }

    /// True when `root` holds a repository (its marker exists): one request, no password.
    pub async fn exists(remote: &Remote, root: &str) -> Result<bool> {
        let marker = join(root.trim_matches('/'), MARKER);
        match remote.head(&marker).await {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Opens the repository under `root` with `password`, keeping metadata in `cache` when
    /// given. The marker, key list and config are asked for at once; meanwhile the key file
    /// that opened the repository last time (from the cache) is unwrapped, since Argon2 takes
    /// as long as a few round trips.
    pub async fn open(
        remote: Remote, root: &str, password: &[u8], cache: Option<Cache>,
    ) -> Result<Repo> {
        let root = root.trim_matches('/').to_string();
        let url = show(&remote, &root);
        let files = Files {
            remote: &remote,
            root: &root,
            cache: cache.as_ref(),
        };
        let guess = cache.as_ref().and_then(|c| {
            let id = c.ids("keys").into_iter().next()?;
            let body = c.get("keys", &id)?;
            let password = password.to_vec();
            Some((
                id,
                tokio::task::spawn_blocking(move || unwrap_key(&body, &password)),
            ))
        });
        let (marker_key, config_key) = (join(&root, MARKER), join(&root, "config"));
        let (marker, keys, config) = tokio::join!(
            remote.head(&marker_key),
            files.list_ids("keys"),
            files.read_small(&config_key),
        );
        match marker {
            Ok(_) => {}
            Err(Error::NotFound(_)) => {
                return Err(Error::Invalid(format!(
                "{url} is not a ferry repository (no {MARKER} marker; create one with ferry init)"
            )))
            }
            Err(e) => return Err(e),
        }
        let (key, opened_with) = files.unlock(&keys?, guess, password).await?;
        if let Some(c) = &cache {
            // The cache keeps one key file, the one to try first next time: it is there
            // already, as the guess or as load_raw cached every key file it read.
            c.retain("keys", &[opened_with].into());
        }
        let cfg = key.open(Kind::Config, &config?, &format!("{url}/config"))?;
        let config: Config = serde_json::from_slice(&cfg)
            .map_err(|e| Error::Checksum(format!("{url}/config: {e}")))?;
        check_format(&config, &key, &url)?;
        Ok(Repo {
            remote,
            root,
            key,
            opened_with: Some(opened_with),
            cache,
            config,
            held: Default::default(),
        })
    }

    /// Every snapshot, oldest first; refused, naming it, when one cannot be read (`check`
    /// and `prune` use [`crate::checker::snapshots`], which reports instead).
    pub async fn snapshots(&self) -> Result<Vec<(Id, crate::Snapshot)>> {
        let mut errors = Vec::new();
        let snaps = crate::checker::snapshots(self, &mut errors).await?;
        match errors.into_iter().next() {
            Some(e) => Err(Error::Checksum(format!("{e} (run ferry check)"))),
            None => Ok(snaps),
        }
    }

    /// The snapshots `filter` chooses, oldest first.
    pub async fn snapshots_matching(
        &self, filter: &crate::snapshot::Filter,
    ) -> Result<Vec<(Id, crate::Snapshot)>> {
        let mut snaps = self.snapshots().await?;
        snaps.retain(|(_, s)| filter.matches(s));
        Ok(snaps)
    }

    /// The snapshot `which` names: "latest" or a unique prefix of its id.
    pub async fn snapshot(&self, which: &str) -> Result<(Id, crate::Snapshot)> {
        self.snapshot_in(which, &crate::snapshot::Filter::default())
            .await
    }

    /// The snapshot `which` names among those `filter` chooses: "latest" is the newest of
    /// them (of that host, with those tags), an id prefix must name one of them.
    pub async fn snapshot_in(
        &self, which: &str, filter: &crate::snapshot::Filter,
    ) -> Result<(Id, crate::Snapshot)> {
        let snaps = self.snapshots_matching(filter).await?;
        let chosen = match filter.is_empty() {
            true => "",
            false => " (of those --host/--tag/--path choose)",
        };
        if which == "latest" {
            return snaps
                .into_iter()
                .last()
                .ok_or_else(|| Error::Invalid(format!("{}: no snapshots{chosen}", self.url())));
        }
        let want = which.to_ascii_lowercase();
        if want.is_empty() || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::Invalid(format!(
                "'{which}' is no snapshot: give \"latest\" or an id (a unique prefix)"
            )));
        }
        let mut hits: Vec<_> = snaps
            .into_iter()
            .filter(|(id, _)| id.hex().starts_with(&want))
            .collect();
        match hits.len() {
            1 => Ok(hits.remove(0)),
            0 => Err(Error::Invalid(format!(
                "no snapshot {which} in {}{chosen}",
                self.url()
            ))),
            n => Err(Error::Invalid(format!(
                "{which} matches {n} snapshots: give more digits"
            ))),
        }
    }

    /// The entries of directory `dir` (absolute, or relative to the snapshot's root) in the
    /// snapshot `which` names, with the directory's path.
    pub async fn list_dir(
        &self, which: &str, dir: &std::path::Path,
    ) -> Result<(std::path::PathBuf, Vec<crate::tree::Node>)> {
        let ((_, snap), (index, _)) = tokio::try_join!(self.snapshot(which), self.index())?;
        let mut tree = crate::load_tree(self, &index, &snap.tree).await?;
        let mut path = std::path::PathBuf::from("/");
        for comp in dir.strip_prefix("/").unwrap_or(dir).iter() {
            let missing = |why: &str| Error::Invalid(format!("{}: {why}", dir.display()));
            let node = tree
                .nodes
                .iter()
                .find(|n| n.name_bytes() == comp.as_encoded_bytes())
                .ok_or_else(|| missing("not in the snapshot"))?;
            let sub = node.subtree.ok_or_else(|| missing("not a directory"))?;
            path.push(comp);
            tree = crate::load_tree(self, &index, &sub).await?;
        }
        Ok((path, tree.nodes))
    }

    /// Adds a key file for `password`; returns its id.
    pub async fn add_key(&self, password: &[u8]) -> Result<Id> {
        let key = self.key.clone();
        let password = password.to_vec();
        let mut kf = tokio::task::spawn_blocking(move || KeyFile::wrap(&key, &password))
            .await
            .map_err(|e| Error::Permanent(e.to_string()))??;
        kf.created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs() as i64);
        kf.host = Some(crate::snapshot::hostname());
        kf.user = std::env::var("USER").ok();
        let body = serde_json::to_vec_pretty(&kf).expect("serializable");
        let id = Id::of(&body);
        self.put(&join(&self.root, &format!("keys/{id}")), body)
            .await?;
        Ok(id)
    }

    /// The key file that opened the repository.
    pub fn opened_with(&self) -> Option<Id> {
        self.opened_with
    }

    /// Ids of the key files.
    pub async fn keys(&self) -> Result<Vec<Id>> {
        self.list_ids("keys").await
    }

    /// The key file `id`, checked against its name; not unwrapped.
    pub async fn key_file(&self, id: &Id) -> Result<KeyFile> {
        let body = self.load_raw("keys", id).await?;
        KeyFile::parse(&body).map_err(|e| Error::Invalid(format!("keys/{id}: {e}")))
    }

    /// Removes a key file.
    pub async fn remove_key(&self, id: &Id) -> Result<()> {
        self.remote
            .delete(&join(&self.root, &format!("keys/{id}")))
            .await
    }

    /// The repository's location, for messages.
    pub fn url(&self) -> String {
        show(&self.remote, &self.root)
    }

    /// The master key.
    pub fn key(&self) -> &MasterKey {
        &self.key
    }

    /// The store and the key of `rel` in it.
    pub fn path(&self, rel: &str) -> String {
        join(&self.root, rel)
    }

    /// The store, through the engine.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Where pack `id` lives.
    pub fn pack_path(&self, id: &Id) -> String {
        let h = id.hex();
        join(&self.root, &format!("data/{}/{h}", &h[..2]))
    }

    pub(crate) async fn put(&self, key: &str, body: Vec<u8>) -> Result<u64> {
        // A pack is written to local disk in milliseconds and the next one takes a few hundred
        // to fill: pooled, its buffer would sit idle nearly all the time, a second pack's
        // worth of resident memory (first backup of 1.3 GB of a toolchain: 110-114 -> 80-81
        // MiB peak RSS, freed instead). Remote stores keep several packs in flight and reuse.
        let body = if self.remote.is_local() {
            bytes::Bytes::from(body)
        } else {
            buffer::bytes(body)
        };
        self.remote.upload_bytes(body, key, None).await
    }

    /// A whole object.
    pub async fn read(&self, key: &str) -> Result<Vec<u8>> {
        self.files().read(key).await
    }

    /// A whole small object (config, key, index, snapshot, lock file) in one request.
    pub async fn read_small(&self, key: &str) -> Result<Vec<u8>> {
        self.files().read_small(key).await
    }

    /// What the key is not needed for: reading and listing the repository's files.
    fn files(&self) -> Files<'_> {
        Files {
            remote: &self.remote,
            root: &self.root,
            cache: self.cache.as_ref(),
        }
    }

    /// The stored bytes of `kind/id`, from the cache when it has them, checked against the
    /// name.
    async fn load_raw(&self, kind: &str, id: &Id) -> Result<Vec<u8>> {
        self.files().load_raw(kind, id).await
    }

    /// The whole pack `id`, which holds trees, from the cache when it has it.
    pub async fn tree_pack(&self, id: &Id) -> Result<Vec<u8>> {
        if let Some(body) = self.cache.as_ref().and_then(|c| c.get("trees", id)) {
            return Ok(body);
        }
        let body = self.read(&self.pack_path(id)).await?;
        if Id::of(&body) != *id {
            return Err(Error::Checksum(format!(
                "{}: pack does not match its name (damaged)",
                self.pack_path(id)
            )));
        }
        if let Some(c) = &self.cache {
            c.put("trees", id, &body);
        }
        Ok(body)
    }

    /// The cache, if this repository keeps one.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// A range of an object.
    pub async fn read_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<bytes::Bytes> {
        self.remote.get_range(key, range).await
    }

    /// Counts `lock` among the locks this process holds, until [`Repo::unhold`].
    pub(crate) fn hold(&self, lock: Arc<Health>) {
        self.held.lock().expect("held locks").push(lock);
    }

    /// Stops counting `lock`: released.
    pub(crate) fn unhold(&self, lock: &Arc<Health>) {
        self.held
            .lock()
            .expect("held locks")
            .retain(|h| !Arc::ptr_eq(h, lock));
    }

    /// An error when a lock this process holds was lost: another process may have taken it
    /// as dead and acted (a prune deleting what this one is about to name).
    pub fn locks_held(&self) -> Result<()> {
        let held = self.held.lock().expect("held locks").clone();
        held.iter().try_for_each(|h| h.check())
    }

    /// Stores `plain` as an encrypted, compressed file of `kind` (index, snapshots, locks),
    /// under the directory the kind names. An index or snapshot file is written only while
    /// every lock this process holds is (see [`crate::lock`]).
    pub async fn save_file(&self, kind: Kind, plain: &[u8]) -> Result<Id> {
        if matches!(kind, Kind::Index | Kind::Snapshot) {
            self.locks_held()?;
        }
        let packed = zstd::bulk::compress(plain, 3).map_err(|e| Error::Permanent(e.to_string()))?;
        let sealed = self.key.seal(kind, &packed);
        let kind = kind.name();
        let id = Id::of(&sealed);
        let cache = self.cache.as_ref().filter(|_| cached_kind(kind));
        if let Some(c) = cache {
            c.put(kind, &id, &sealed);
        }
        self.put(&join(&self.root, &format!("{kind}/{id}")), sealed)
            .await?;
        Ok(id)
    }

    /// Reads a file [`Repo::save_file`] wrote, checked against its name and decrypted.
    pub async fn load_file(&self, kind: Kind, id: &Id) -> Result<Vec<u8>> {
        let sealed = self.load_raw(kind.name(), id).await?;
        let what = format!("{}/{}/{id}", self.url(), kind.name());
        let packed = self.key.open(kind, &sealed, &what)?;
        // Bounded as a blob is: a file of millions of index entries is hundreds of MiB.
        let mut plain = Vec::new();
        crate::blob::decompress_capped(&packed, &mut plain, crate::blob::MAX_BLOB)
            .map_err(|e| Error::Checksum(format!("{what}: does not decompress: {e}")))?;
        Ok(plain)
    }

    /// Ids of the files of `kind`.
    pub async fn list_ids(&self, kind: &str) -> Result<Vec<Id>> {
        self.files().list_ids(kind).await
    }

    /// Why the file `kind/id` may not be deleted now (Object Lock), or `None`.
    pub async fn file_retention(&self, kind: &str, id: &Id) -> Result<Option<String>> {
        self.remote
            .retention(&join(&self.root, &format!("{kind}/{id}")))
            .await
    }

    /// Deletes the file `kind/id`.
    pub async fn delete_file(&self, kind: &str, id: &Id) -> Result<()> {
        self.remote
            .delete(&join(&self.root, &format!("{kind}/{id}")))
            .await
    }

    /// The index and its files' ids, refused (naming the first) when a file of it cannot be
    /// read: what a backup or a restore works from. `check` and `prune` report instead, through
    /// [`Repo::load_index`].
    pub async fn index(&self) -> Result<(Index, Vec<Id>)> {
        let (index, loaded, errs) = self.load_index().await?;
        whole_index(errs)?;
        Ok((index, loaded))
    }

    /// Loads every index file in parallel; returns the index and the files' ids. Damaged
    /// index files are returned as errors beside the rest.
    pub async fn load_index(&self) -> Result<(Index, Vec<Id>, Vec<Error>)> {
        let ids = self.list_ids("index").await?;
        if let Some(c) = &self.cache {
            c.retain("index", &ids.iter().copied().collect());
        }
        let mut loaded = futures::stream::iter(ids.clone())
            .map(|id| async move {
                let what = format!("{}/index/{id}", self.url());
                let r = self.load_file(Kind::Index, &id).await;
                (id, r.and_then(|b| index::decode(&b, &what)))
            })
            .buffer_unordered(READ_AHEAD);
        let mut idx = Index::default();
        let mut errors = Vec::new();
        let mut good = Vec::new();
        while let Some((id, r)) = loaded.next().await {
            match r {
                Ok(packs) => {
                    for (p, e) in &packs {
                        idx.add_pack(*p, e);
                    }
                    good.push(id);
                }
                Err(e) => errors.push(e),
            }
        }
        // Only then is the store's listing of packs worth its requests; without it, the
        // choice is as before (a restore that needs no conflicting blob still runs).
        match idx.conflicts() {
            true => match self.stored_packs().await {
                Ok(stored) => idx.finish_stored(&stored),
                Err(e) => {
                    tracing::warn!("listing the packs to choose between a blob's places: {e}");
                    idx.finish();
                }
            },
            false => idx.finish(),
        }
        Ok((idx, good, errors))
    }

    /// Every pack the store holds, with its size.
    pub async fn stored_packs(&self) -> Result<HashMap<Id, u64>> {
        let listing = self.remote.list(&self.path("data/")).await?;
        Ok(listing
            .iter()
            .filter_map(|o| Some((Id::parse(o.key.rsplit('/').next()?)?, o.size)))
            .collect())
    }
}

/// The repository's files as read before its key is known (opening reads the key files and
/// the config through it), and after.
struct Files<'a> {
    remote: &'a Remote,
    root: &'a str,
    cache: Option<&'a Cache>,
}

impl Files<'_> {
    fn url(&self) -> String {
        show(self.remote, self.root)
    }

    async fn read(&self, key: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.remote.download(key, &mut out, &NoProgress).await?;
        Ok(out)
    }

    async fn read_small(&self, key: &str) -> Result<Vec<u8>> {
        Ok(self.remote.get(key).await?.into())
    }

    /// The master key `password` unwraps from one of the key files `keys`: first the one
    /// `guess` is already unwrapping (the key file that opened the repository last time),
    /// then each in turn. A damaged key file does not keep another one from opening.
    async fn unlock(
        &self, keys: &[Id], guess: Option<(Id, Unwrapping)>, password: &[u8],
    ) -> Result<(MasterKey, Id)> {
        let mut found = None;
        if let Some((id, task)) = guess {
            // A key file removed from the store (key passwd) no longer opens it.
            if let (true, Ok(Ok(Some(key)))) = (keys.contains(&id), task.await) {
                found = Some((key, id));
            }
        }
        let mut damaged = Vec::new();
        for (n, id) in keys.iter().enumerate() {
            if found.is_some() {
                break;
            }
            if n == MAX_KEYS {
                // Each costs an Argon2 run: a store writer who plants thousands would make
                // opening the repository take hours. restic stops at 20 too.
                return Err(Error::Denied(format!(
                    "wrong password for repository {}: no key file opened with it in the \
                     first {MAX_KEYS} of {} (if it is right, remove the key files no one uses \
                     from keys/ in the store)",
                    self.url(),
                    keys.len()
                )));
            }
            // A damaged or vanished key file does not keep another one from opening.
            let body = match self.load_raw("keys", id).await {
                Ok(b) => b,
                Err(e @ (Error::Checksum(_) | Error::NotFound(_))) => {
                    damaged.push(format!("keys/{id} ({e})"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let password = password.to_vec();
            let opened = tokio::task::spawn_blocking(move || unwrap_key(&body, &password))
                .await
                .map_err(|e| Error::Permanent(e.to_string()))?;
            match opened {
                Ok(Some(key)) => found = Some((key, *id)),
                Ok(None) => {}
                Err(e) => damaged.push(format!("keys/{id} ({e})")),
            }
        }
        found.ok_or_else(|| {
            let why = if damaged.is_empty() {
                String::new()
            } else {
                format!("; damaged: {}", damaged.join(", "))
            };
            Error::Denied(format!(
                "wrong password for repository {}, or its key files are damaged \
                 ({} tried{why})",
                self.url(),
                keys.len()
            ))
        })
    }

    /// The stored bytes of `kind/id`, from the cache when it has them, checked against the
    /// name.
    async fn load_raw(&self, kind: &str, id: &Id) -> Result<Vec<u8>> {
        let cache = self.cache.as_ref().filter(|_| cached_kind(kind));
        if let Some(body) = cache.and_then(|c| c.get(kind, id)) {
            return Ok(body);
        }
        let key = join(self.root, &format!("{kind}/{id}"));
        // Index files run to megabytes: read them with a deadline that grows with their size.
        let body = if kind == "index" {
            self.read(&key).await?
        } else {
            self.read_small(&key).await?
        };
        if Id::of(&body) != *id {
            return Err(Error::Checksum(format!(
                "{}/{kind}/{id}: content does not match its name (damaged)",
                self.url()
            )));
        }
        if let Some(c) = cache {
            c.put(kind, id, &body);
        }
        Ok(body)
    }

    /// Ids of the files of `kind`.
    async fn list_ids(&self, kind: &str) -> Result<Vec<Id>> {
        let prefix = join(self.root, &format!("{kind}/"));
        let objs = self.remote.list(&prefix).await?;
        Ok(objs
            .iter()
            .filter_map(|o| Id::parse(o.key.rsplit('/').next()?))
            .collect())
    }
}

/// Refuses an index of which a file could not be read, naming the first.
pub(crate) fn whole_index(errs: Vec<Error>) -> Result<()> {
    match errs.into_iter().next() {
        Some(e) => Err(Error::Permanent(format!("{e} (run ferry check)"))),
        None => Ok(()),
    }
}

/// Refuses a config with sizes out of range, or that does not go with the key that opened
/// it: a format this ferry does not know, or one other than the key file's (a format 1 key
/// file carries no repository id; a format 2 one carries the id the config must hold).
fn check_format(config: &Config, key: &MasterKey, url: &str) -> Result<()> {
    if config.version > FORMAT || config.version == 0 {
        return Err(Error::Invalid(format!(
            "{url}: repository format {} is not one this ferry reads (1 to {FORMAT}); \
             a newer ferry made it",
            config.version
        )));
    }
    // Chunk and pack sizes size buffers: outside what the chunker takes (fastcdc's bounds)
    // or past 1 GiB a pack, they are refused here rather than allocated or panicked on.
    use fastcdc::v2020::{
        AVERAGE_MAX, AVERAGE_MIN, MAXIMUM_MAX, MAXIMUM_MIN, MINIMUM_MAX, MINIMUM_MIN,
    };
    let sizes_ok = (MINIMUM_MIN..=MINIMUM_MAX).contains(&config.chunk_min)
        && (AVERAGE_MIN..=AVERAGE_MAX).contains(&config.chunk_avg)
        && (MAXIMUM_MIN..=MAXIMUM_MAX).contains(&config.chunk_max)
        && config.chunk_min <= config.chunk_avg
        && config.chunk_avg <= config.chunk_max
        && (1..=1 << 30).contains(&config.pack_size);
    if !sizes_ok {
        return Err(Error::Invalid(format!(
            "{url}/config: chunk sizes {}/{}/{} or pack size {} out of range",
            config.chunk_min, config.chunk_avg, config.chunk_max, config.pack_size
        )));
    }
    let fits = match key.scope() {
        None => config.version == 1,
        Some(id) => config.version >= 2 && config.id == id,
    };
    if !fits {
        return Err(Error::Checksum(format!(
            "{url}/config: format {} config does not go with the key file that opened it \
             (swapped or downgraded)",
            config.version
        )));
    }
    Ok(())
}

/// A key file being unwrapped off the async workers (Argon2 takes a fraction of a second).
type Unwrapping = tokio::task::JoinHandle<Result<Option<MasterKey>>>;

/// Unwraps a stored key file with `password`: `Ok(None)` when the password is not its.
fn unwrap_key(body: &[u8], password: &[u8]) -> Result<Option<MasterKey>> {
    KeyFile::parse(body)?.unwrap(password)
}

fn show(store: &Remote, root: &str) -> String {
    let base = store.url();
    let base = base.trim_end_matches('/');
    match (base.is_empty(), root.is_empty()) {
        (_, true) => base.to_string(),
        (true, false) => format!("/{root}"),
        (false, false) => format!("{base}/{root}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_a_config_cannot_hold_are_refused() {
        let id = Id::of(b"repo");
        let key = MasterKey::generate(id);
        let good = Config {
            version: FORMAT,
            id,
            chunk_min: 512 << 10,
            chunk_avg: 1 << 20,
            chunk_max: 8 << 20,
            pack_size: 16 << 20,
        };
        assert!(check_format(&good, &key, "r").is_ok());
        // A chunker buffer of 4 GiB, chunks past fastcdc's bounds, a min above the average,
        // a pack of 0 or 4 GiB: each refused with one line before anything is allocated.
        for bad in [
            Config {
                chunk_max: u32::MAX,
                ..good.clone()
            },
            Config {
                chunk_avg: u32::MAX,
                ..good.clone()
            },
            Config {
                chunk_min: 8,
                ..good.clone()
            },
            Config {
                chunk_min: 1 << 20,
                chunk_avg: 512 << 10,
                ..good.clone()
            },
            Config {
                pack_size: 0,
                ..good.clone()
            },
            Config {
                pack_size: u32::MAX,
                ..good.clone()
            },
        ] {
            let e = check_format(&bad, &key, "r").expect_err("out of range");
            assert!(e.to_string().contains("out of range"), "{e}");
        }
    }
}

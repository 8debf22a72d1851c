//! The WAL archive at a place that may or may not be a ferry repository: plaintext where there
//! is no repository marker, sealed with the repository's key where there is one, and a
//! plaintext object in a repository's archive refused as planted.
//!
//! The password is asked for only when a key is needed, through the caller's closure: a
//! fetch of a missing or plaintext file costs no Argon2, and a program without a terminal
//! (an agent, a server) hands in what it was given.

use std::sync::Arc;

use ferry_repo::Repo;
use ferry_transfer::{Error, Remote, Result};
use ferry_wal::envelope::{downgraded, Cipher};
use ferry_wal::{Archive, WalName};

use crate::walview::wal_key;

/// Where a WAL archive is, and how it is compressed when written.
pub struct WalAccess {
    remote: Remote,
    root: String,
    level: i32,
    /// See [`WalAccess::sealed_only`].
    sealed_only: bool,
}

/// An archive opened with the repository's key, and the password that opened it.
pub struct Unlocked {
    /// The archive, sealed with the repository's WAL key.
    pub archive: Arc<Archive>,
    /// The password that opened the repository.
    pub password: Vec<u8>,
}

impl WalAccess {
    /// The archive at `root` of `remote`, written at zstd `level`.
    pub fn new(remote: Remote, root: &str, level: i32) -> WalAccess {
        WalAccess {
            remote,
            root: root.to_string(),
            level,
            sealed_only: false,
        }
    }

    /// With `yes` (the caller was given a password: it expects a repository), the archive
    /// is sealed or refused. The marker that tells a repository from a plaintext archive is
    /// an object like any other: whoever can write the store can delete it, and plant
    /// plaintext WAL that PostgreSQL would replay, or have new WAL archived unencrypted.
    /// What the caller was given, not what the store says, decides then.
    pub fn sealed_only(mut self, yes: bool) -> WalAccess {
        self.sealed_only = yes;
        self
    }

    fn no_marker(&self) -> Error {
        Error::Permanent(format!(
            "{}: no ferry repository here (its marker is missing), yet a password is set: \
             refusing to use its WAL archive unencrypted (unset the password for a plaintext \
             archive, or give the repository's place)",
            self.plain().url()
        ))
    }

    /// Opens connections to the archive's store without waiting, for an agent about to move
    /// many files at once: they are ready by the time its first files go out, instead of
    /// each costing its first request a round trip more.
    pub fn warm(&self) {
        self.plain().warm();
    }

    /// True when the place is a ferry repository: its archive is then encrypted. One HEAD.
    pub async fn is_repository(&self) -> Result<bool> {
        Repo::exists(&self.remote, &self.root).await
    }

    /// The archive without a key: listings, headers, gaps and plaintext files.
    pub fn plain(&self) -> Arc<Archive> {
        Archive::with_key(self.remote.clone(), &self.root, self.level, None)
    }

    /// Opens the repository with the password `ask` gives (Argon2, about 0.2 s of CPU) and
    /// returns its archive; `None` when the place is no repository (the archive is then
    /// plaintext and no password is asked for).
    pub async fn unlock(&self, ask: impl FnOnce() -> Result<Vec<u8>>) -> Result<Option<Unlocked>> {
        if !self.is_repository().await? {
            return match self.sealed_only {
                true => Err(self.no_marker()),
                false => Ok(None),
            };
        }
        let password = ask()?;
        let repo = Repo::open(self.remote.clone(), &self.root, &password, None).await?;
        let key = Some(wal_key(&repo));
        let archive = Archive::with_key(self.remote.clone(), &self.root, self.level, key);
        Ok(Some(Unlocked { archive, password }))
    }

    /// The archive every file is written to or read from: keyed in a repository, plaintext
    /// elsewhere.
    pub async fn keyed(&self, ask: impl FnOnce() -> Result<Vec<u8>>) -> Result<Arc<Archive>> {
        Ok(match self.unlock(ask).await? {
            Some(u) => u.archive,
            None => self.plain(),
        })
    }

    /// The archive to fetch `name` from, decided by its header: a missing file is
    /// `NotFound` and a plaintext one is read without a password; an encrypted one asks for
    /// it. A plaintext file in a repository's archive is refused: nothing authenticates it.
    pub async fn for_fetch(
        &self, name: &WalName, ask: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Arc<Archive>> {
        let plain = self.plain();
        match plain.peek(name).await {
            Ok(h) if h.cipher == Cipher::XChaCha20Poly1305 => self.keyed(ask).await,
            Ok(_) if self.sealed_only || self.is_repository().await? => {
                Err(downgraded(&format!("{}/wal/{}", plain.url(), name.key())))
            }
            Ok(_) => Ok(plain),
            // A damaged header: the fetch reads the object again and reports it, with the key
            // where one exists, so that a plaintext object put back in between (a store
            // writer alternating the two) is refused, not handed over unauthenticated.
            Err(Error::Checksum(_)) if self.sealed_only || self.is_repository().await? => {
                self.keyed(ask).await
            }
            Err(Error::Checksum(_)) => Ok(plain),
            Err(e) => Err(e),
        }
    }
}

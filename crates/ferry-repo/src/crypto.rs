//! Keys: a random master key, wrapped by a key derived from the password with Argon2id, and
//! the AEAD (XChaCha20-Poly1305, random 192-bit nonces) every stored byte goes through.
//!
//! Format 2 binds what a sealed piece is and which repository it belongs to into the AEAD's
//! associated data ([`Kind`] and the repository id), so that whoever can write the store
//! cannot make a snapshot stand in for an index file, a tree for file content, or a file of
//! another repository (sealed under the same key) for one of this one's: each fails to open.
//! Format 1 repositories seal without associated data and stay readable.

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ferry_transfer::{Error, Result};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::id::Id;
use crate::kdf_memory::KdfMemory;

const NONCE: usize = 24;
/// Room [`MasterKey::seal_in_place`] wants before the plaintext, for the nonce.
pub const SEAL_ROOM: usize = NONCE;
const TAG: usize = 16;
/// Bytes an encrypted blob or file has beyond its plaintext.
pub const OVERHEAD: usize = NONCE + TAG;

/// What a sealed piece of a repository is: part of the associated data in format 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The repository's settings (`config`).
    Config,
    /// An index file (`index/`).
    Index,
    /// A snapshot (`snapshots/`).
    Snapshot,
    /// A lock file (`locks/`).
    Lock,
    /// A pack's blob list.
    PackHeader,
    /// A blob of file content.
    DataBlob,
    /// A blob holding a directory listing.
    TreeBlob,
}

impl Kind {
    /// Every kind, for naming what a misplaced piece really is.
    pub const ALL: [Kind; 7] = [
        Kind::Config,
        Kind::Index,
        Kind::Snapshot,
        Kind::Lock,
        Kind::PackHeader,
        Kind::DataBlob,
        Kind::TreeBlob,
    ];

    /// Its name: in the associated data, in messages, and for files the store's directory.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Index => "index",
            Kind::Snapshot => "snapshots",
            Kind::Lock => "locks",
            Kind::PackHeader => "pack header",
            Kind::DataBlob => "data blob",
            Kind::TreeBlob => "tree blob",
        }
    }
}

/// Associated data: `"ferry 2 "`, the kind's name, a NUL, and the 32-byte repository id; none
/// for format 1. Fixed-size so that sealing a blob allocates nothing.
struct Ad {
    buf: [u8; 64],
    len: usize,
}

impl Ad {
    fn new(kind: Kind, scope: Option<&Id>) -> Self {
        let mut ad = Ad {
            buf: [0; 64],
            len: 0,
        };
        if let Some(id) = scope {
            for part in [b"ferry 2 ", kind.name().as_bytes(), b"\0", &id.0[..]] {
                ad.buf[ad.len..ad.len + part.len()].copy_from_slice(part);
                ad.len += part.len();
            }
        }
        ad
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The repository's secret: one key for the AEAD, one for chunk ids (so that ids reveal
/// nothing about content to whoever reads the store); in format 2, with the repository id
/// every seal is bound to.
#[derive(Clone)]
pub struct MasterKey {
    enc: [u8; 32],
    mac: [u8; 32],
    scope: Option<Id>,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

#[derive(Serialize, Deserialize)]
struct KeyMaterial {
    enc: String,
    mac: String,
    /// The repository id, hex: present from format 2 on, absent in format 1 key files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repo: Option<String>,
}

impl MasterKey {
    /// A new random key for the format 2 repository `repo`.
    pub fn generate(repo: Id) -> Self {
        let mut k = Self {
            enc: [0; 32],
            mac: [0; 32],
            scope: Some(repo),
        };
        rand::rng().fill_bytes(&mut k.enc);
        rand::rng().fill_bytes(&mut k.mac);
        k
    }

    /// The same key sealing as format 1 does: no associated data. For format 1
    /// repositories, and for tests that show a format 1 piece refused in format 2.
    pub fn format1(mut self) -> Self {
        self.scope = None;
        self
    }

    /// The repository id this key binds every seal to; `None` for format 1.
    pub fn scope(&self) -> Option<Id> {
        self.scope
    }

    /// A 32-byte key for another purpose (the WAL archive's AEAD, say), derived from the
    /// encryption key with BLAKE3's key derivation under `context`, so that layers above
    /// never hold the master key itself and each purpose has its own. In format 2 the
    /// repository id goes in too: the WAL of one repository does not open in another.
    pub fn subkey(&self, context: &str) -> [u8; 32] {
        match &self.scope {
            None => blake3::derive_key(context, &self.enc),
            Some(id) => {
                let mut material = [0u8; 64];
                material[..32].copy_from_slice(&self.enc);
                material[32..].copy_from_slice(&id.0);
                blake3::derive_key(context, &material)
            }
        }
    }

    /// Encrypts `plain` as a `kind`: nonce, then ciphertext and tag.
    pub fn seal(&self, kind: Kind, plain: &[u8]) -> Vec<u8> {
        let mut buf = Vec::with_capacity(OVERHEAD + plain.len());
        buf.resize(SEAL_ROOM, 0);
        buf.extend_from_slice(plain);
        self.seal_in_place(kind, &mut buf);
        buf
    }

    /// Seals `buf[SEAL_ROOM..]` where it lies, to the same format as [`MasterKey::seal`]:
    /// the nonce goes into the room before it and the tag is appended. No buffer is
    /// allocated, so a caller can reuse one for every blob.
    pub fn seal_in_place(&self, kind: Kind, buf: &mut Vec<u8>) {
        let mut nonce = [0u8; NONCE];
        rand::rng().fill_bytes(&mut nonce);
        buf[..NONCE].copy_from_slice(&nonce);
        let ad = Ad::new(kind, self.scope.as_ref());
        let tag = XChaCha20Poly1305::new((&self.enc).into())
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), ad.bytes(), &mut buf[NONCE..])
            .expect("encryption cannot fail for in-memory buffers");
        buf.extend_from_slice(&tag);
    }

    /// Decrypts what [`MasterKey::seal`] made of a `kind`; `what` names it in the error.
    pub fn open(&self, kind: Kind, sealed: &[u8], what: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.open_into(kind, sealed, &mut out, what)?;
        Ok(out)
    }

    /// Decrypts what [`MasterKey::seal`] made of a `kind` into `out`, replacing what it held:
    /// a caller that reuses `out` allocates nothing per call. The error says what the piece
    /// really is when it opens as another kind, or as format 1 in a format 2 repository.
    pub fn open_into(
        &self, kind: Kind, sealed: &[u8], out: &mut Vec<u8>, what: &str,
    ) -> Result<()> {
        if self.try_open(kind, self.scope.as_ref(), sealed, out) {
            return Ok(());
        }
        let why = match self.sealed_as(sealed) {
            Some(other) => format!(
                "{other}, where {} belongs (swapped or downgraded)",
                kind.name()
            ),
            None => "does not decrypt (damaged or not this repository's)".to_string(),
        };
        Err(Error::Checksum(format!("{what}: {why}")))
    }

    /// What `sealed` opens as, other than what its reader expected: another kind of this
    /// repository, or a format 1 piece in a format 2 repository. Runs only on the error path.
    fn sealed_as(&self, sealed: &[u8]) -> Option<String> {
        let mut scratch = Vec::new();
        if let Some(k) = Kind::ALL
            .iter()
            .find(|k| self.try_open(**k, self.scope.as_ref(), sealed, &mut scratch))
        {
            return Some(format!("sealed as {}", k.name()));
        }
        (self.scope.is_some() && self.try_open(Kind::Config, None, sealed, &mut scratch))
            .then(|| "sealed without format 2's binding (a format 1 piece)".to_string())
    }

    fn try_open(&self, kind: Kind, scope: Option<&Id>, sealed: &[u8], out: &mut Vec<u8>) -> bool {
        if sealed.len() < OVERHEAD {
            return false;
        }
        let (nonce, rest) = sealed.split_at(NONCE);
        let (ct, tag) = rest.split_at(rest.len() - TAG);
        out.clear();
        out.extend_from_slice(ct);
        let ad = Ad::new(kind, scope);
        XChaCha20Poly1305::new((&self.enc).into())
            .decrypt_in_place_detached(XNonce::from_slice(nonce), ad.bytes(), out, tag.into())
            .is_ok()
    }

    /// The id of a blob with this plaintext.
    pub fn blob_id(&self, plain: &[u8]) -> Id {
        Id(*blake3::keyed_hash(&self.mac, plain).as_bytes())
    }
}

fn seal_with(key: &[u8; 32], plain: &[u8]) -> Vec<u8> {
    let mut nonce = [0u8; NONCE];
    rand::rng().fill_bytes(&mut nonce);
    let ct = XChaCha20Poly1305::new(key.into())
        .encrypt(XNonce::from_slice(&nonce), plain)
        .expect("encryption cannot fail for in-memory buffers");
    let mut out = Vec::with_capacity(NONCE + ct.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    out
}

fn open_with(key: &[u8; 32], sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < OVERHEAD {
        return None;
    }
    let (nonce, ct) = sealed.split_at(NONCE);
    XChaCha20Poly1305::new(key.into())
        .decrypt(XNonce::from_slice(nonce), ct)
        .ok()
}

/// A key file: the master key wrapped under a password. Stored as `keys/<id>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyFile {
    /// Key derivation function: always `argon2id`.
    pub kdf: String,
    /// Argon2 memory in KiB.
    pub m_cost: u32,
    /// Argon2 passes.
    pub t_cost: u32,
    /// Argon2 lanes.
    pub p_cost: u32,
    /// Random salt, hex.
    pub salt: String,
    /// The sealed master key, hex.
    pub wrapped: String,
    /// When the key file was made (Unix seconds). Like `host` and `user`, for `key list`
    /// only: not authenticated, since whoever writes the store could change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<i64>,
    /// The host it was made on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The user who made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Argon2id cost: 64 MiB and 3 passes, about 0.2 s here, per RFC 9106's second choice.
const M_COST: u32 = 64 * 1024;
const T_COST: u32 = 3;
/// The most a key file read from the store may ask for: 1 GiB, 10 passes, 8 lanes. Whoever
/// can write the store can write a key file; without a cap it could make every open
/// allocate and compute without bound.
const MAX_M_COST: u32 = 1 << 20;
const MAX_T_COST: u32 = 10;
const MAX_P_COST: u32 = 8;

fn derive(password: &[u8], salt: &[u8], m: u32, t: u32, p: u32) -> Result<[u8; 32]> {
    let params =
        Params::new(m, t, p, Some(32)).map_err(|e| Error::Invalid(format!("key file: {e}")))?;
    let mut out = [0u8; 32];
    let mut memory = KdfMemory::new(params.block_count())?;
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into_with_memory(password, salt, &mut out, memory.blocks())
        .map_err(|e| Error::Invalid(format!("key derivation: {e}")))?;
    Ok(out)
}

impl KeyFile {
    /// Wraps `key` under `password`.
    pub fn wrap(key: &MasterKey, password: &[u8]) -> Result<Self> {
        let mut salt = [0u8; 16];
        rand::rng().fill_bytes(&mut salt);
        let kek = derive(password, &salt, M_COST, T_COST, 1)?;
        let material = serde_json::to_vec(&KeyMaterial {
            enc: hex::encode(key.enc),
            mac: hex::encode(key.mac),
            repo: key.scope.map(|id| id.hex()),
        })
        .expect("serializable");
        Ok(Self {
            kdf: "argon2id".into(),
            m_cost: M_COST,
            t_cost: T_COST,
            p_cost: 1,
            salt: hex::encode(salt),
            wrapped: hex::encode(seal_with(&kek, &material)),
            created: None,
            host: None,
            user: None,
        })
    }

    /// Parses a stored key file and refuses, before any key derivation, one ferry would not
    /// write: another KDF, costs above the caps, a salt or wrapped key that is not hex.
    pub fn parse(body: &[u8]) -> Result<Self> {
        let kf: KeyFile =
            serde_json::from_slice(body).map_err(|e| Error::Invalid(format!("key file: {e}")))?;
        kf.check()?;
        Ok(kf)
    }

    /// The checks [`KeyFile::parse`] makes; the salt and wrapped key, decoded.
    fn check(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let bad = |w: &str| Error::Invalid(format!("key file: bad {w}"));
        if self.kdf != "argon2id" {
            return Err(bad("kdf"));
        }
        if self.m_cost > MAX_M_COST || self.t_cost > MAX_T_COST || self.p_cost > MAX_P_COST {
            return Err(Error::Invalid(format!(
                "key file: Argon2 cost above ferry's limits (m={} KiB, t={}, p={}): refused",
                self.m_cost, self.t_cost, self.p_cost
            )));
        }
        let salt = hex::decode(&self.salt).map_err(|_| bad("salt"))?;
        let wrapped = hex::decode(&self.wrapped).map_err(|_| bad("wrapped key"))?;
        Params::new(self.m_cost, self.t_cost, self.p_cost, Some(32))
            .map_err(|e| Error::Invalid(format!("key file: {e}")))?;
        Ok((salt, wrapped))
    }

    /// The master key, if `password` opens this key file.
    pub fn unwrap(&self, password: &[u8]) -> Result<Option<MasterKey>> {
        let bad = |w: &str| Error::Invalid(format!("key file: bad {w}"));
        let (salt, wrapped) = self.check()?;
        let kek = derive(password, &salt, self.m_cost, self.t_cost, self.p_cost)?;
        let Some(material) = open_with(&kek, &wrapped) else {
            return Ok(None);
        };
        let m: KeyMaterial = serde_json::from_slice(&material).map_err(|_| bad("key material"))?;
        let scope = match &m.repo {
            None => None,
            Some(h) => Some(Id::parse(h).ok_or_else(|| bad("repository id"))?),
        };
        let mut key = MasterKey {
            enc: [0; 32],
            mac: [0; 32],
            scope,
        };
        hex::decode_to_slice(&m.enc, &mut key.enc).map_err(|_| bad("key material"))?;
        hex::decode_to_slice(&m.mac, &mut key.mac).map_err(|_| bad("key material"))?;
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_unwrap_and_wrong_password() {
        let k = MasterKey::generate(Id::of(b"repo"));
        let f = KeyFile::wrap(&k, b"secret").unwrap();
        let back = f.unwrap(b"secret").unwrap().expect("opens");
        assert_eq!(back.blob_id(b"x"), k.blob_id(b"x"));
        assert!(f.unwrap(b"wrong").unwrap().is_none());
    }

    #[test]
    fn a_key_file_asking_for_unbounded_work_is_refused() {
        let f = KeyFile::wrap(&MasterKey::generate(Id::of(b"repo")), b"secret").unwrap();
        for (m, t, p) in [(u32::MAX, 3, 1), (M_COST, 1 << 20, 1), (M_COST, 3, 255)] {
            let g = KeyFile {
                m_cost: m,
                t_cost: t,
                p_cost: p,
                ..f.clone()
            };
            let e = g.unwrap(b"secret").unwrap_err();
            assert!(e.to_string().contains("above ferry's limits"), "{e}");
        }
    }

    #[test]
    fn sealed_data_is_authenticated() {
        let k = MasterKey::generate(Id::of(b"repo"));
        let mut s = k.seal(Kind::Index, b"hello");
        assert_eq!(k.open(Kind::Index, &s, "x").unwrap(), b"hello");
        s[30] ^= 1;
        assert!(k.open(Kind::Index, &s, "x").is_err());
    }

    #[test]
    fn a_piece_opens_only_as_its_kind_and_names_what_it_is() {
        let k = MasterKey::generate(Id::of(b"repo"));
        for kind in Kind::ALL {
            let s = k.seal(kind, b"x");
            for other in Kind::ALL.into_iter().filter(|o| *o != kind) {
                let e = k.open(other, &s, "f").unwrap_err().to_string();
                let want = format!(
                    "f: sealed as {}, where {} belongs",
                    kind.name(),
                    other.name()
                );
                assert!(e.contains(&want), "{e}");
            }
        }
    }

    #[test]
    fn a_piece_of_another_repository_or_format_1_is_refused() {
        let k = MasterKey::generate(Id::of(b"repo"));
        let elsewhere = MasterKey {
            scope: Some(Id::of(b"another repo")),
            ..k.clone()
        };
        let e = k.open(Kind::Snapshot, &elsewhere.seal(Kind::Snapshot, b"x"), "f");
        assert!(e.unwrap_err().to_string().contains("does not decrypt"));
        let v1 = k.clone().format1().seal(Kind::Snapshot, b"x");
        let e = k.open(Kind::Snapshot, &v1, "f").unwrap_err().to_string();
        assert!(e.contains("a format 1 piece"), "{e}");
        // A format 1 reader does not know kinds: it opens its own pieces.
        assert_eq!(
            k.clone().format1().open(Kind::Index, &v1, "f").unwrap(),
            b"x"
        );
        assert_ne!(k.subkey("c"), k.clone().format1().subkey("c"));
        assert_ne!(k.subkey("c"), elsewhere.subkey("c"));
    }

    #[test]
    fn the_key_file_carries_the_repository_id() {
        let k = MasterKey::generate(Id::of(b"repo"));
        let f = KeyFile::wrap(&k, b"pw").unwrap();
        assert_eq!(
            f.unwrap(b"pw").unwrap().unwrap().scope(),
            Some(Id::of(b"repo"))
        );
        let f1 = KeyFile::wrap(&k.format1(), b"pw").unwrap();
        assert_eq!(f1.unwrap(b"pw").unwrap().unwrap().scope(), None);
    }
}

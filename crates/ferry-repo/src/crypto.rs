//! Keys: a random master key, wrapped by a key derived from the password with Argon2id, and
//! the AEAD (XChaCha20-Poly1305, random 192-bit nonces) every stored byte goes through.

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ferry_store::{Error, Result};
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

/// The repository's secret: one key for the AEAD, one for chunk ids (so that ids reveal
/// nothing about content to whoever reads the store).
#[derive(Clone)]
pub struct MasterKey {
    enc: [u8; 32],
    mac: [u8; 32],
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
}

impl MasterKey {
    /// A new random key.
    pub fn generate() -> Self {
        let mut k = Self {
            enc: [0; 32],
            mac: [0; 32],
        };
        rand::rng().fill_bytes(&mut k.enc);
        rand::rng().fill_bytes(&mut k.mac);
        k
    }

    /// A 32-byte key for another purpose (the WAL archive's AEAD, say), derived from the
    /// encryption key with BLAKE3's key derivation under `context`, so that layers above
    /// never hold the master key itself and each purpose has its own.
    pub fn subkey(&self, context: &str) -> [u8; 32] {
        blake3::derive_key(context, &self.enc)
    }

    /// Encrypts `plain`: nonce, then ciphertext and tag.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        seal_with(&self.enc, plain)
    }

    /// Seals `buf[SEAL_ROOM..]` where it lies, to the same format as [`MasterKey::seal`]:
    /// the nonce goes into the room before it and the tag is appended. No buffer is
    /// allocated, so a caller can reuse one for every blob.
    pub fn seal_in_place(&self, buf: &mut Vec<u8>) {
        let mut nonce = [0u8; NONCE];
        rand::rng().fill_bytes(&mut nonce);
        buf[..NONCE].copy_from_slice(&nonce);
        let tag = XChaCha20Poly1305::new((&self.enc).into())
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), b"", &mut buf[NONCE..])
            .expect("encryption cannot fail for in-memory buffers");
        buf.extend_from_slice(&tag);
    }

    /// Decrypts what [`MasterKey::seal`] made; `what` names it in the error.
    pub fn open(&self, sealed: &[u8], what: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.open_into(sealed, &mut out, what)?;
        Ok(out)
    }

    /// Decrypts what [`MasterKey::seal`] made into `out`, replacing what it held: a caller
    /// that reuses `out` allocates nothing per call.
    pub fn open_into(&self, sealed: &[u8], out: &mut Vec<u8>, what: &str) -> Result<()> {
        let bad = || {
            Error::Checksum(format!(
                "{what}: does not decrypt (damaged or not this repository's)"
            ))
        };
        if sealed.len() < OVERHEAD {
            return Err(bad());
        }
        let (nonce, rest) = sealed.split_at(NONCE);
        let (ct, tag) = rest.split_at(rest.len() - TAG);
        out.clear();
        out.extend_from_slice(ct);
        XChaCha20Poly1305::new((&self.enc).into())
            .decrypt_in_place_detached(XNonce::from_slice(nonce), b"", out, tag.into())
            .map_err(|_| bad())
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
        })
        .expect("serializable");
        Ok(Self {
            kdf: "argon2id".into(),
            m_cost: M_COST,
            t_cost: T_COST,
            p_cost: 1,
            salt: hex::encode(salt),
            wrapped: hex::encode(seal_with(&kek, &material)),
        })
    }

    /// The master key, if `password` opens this key file.
    pub fn unwrap(&self, password: &[u8]) -> Result<Option<MasterKey>> {
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
        let kek = derive(password, &salt, self.m_cost, self.t_cost, self.p_cost)?;
        let Some(material) = open_with(&kek, &wrapped) else {
            return Ok(None);
        };
        let m: KeyMaterial = serde_json::from_slice(&material).map_err(|_| bad("key material"))?;
        let mut key = MasterKey {
            enc: [0; 32],
            mac: [0; 32],
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
        let k = MasterKey::generate();
        let f = KeyFile::wrap(&k, b"secret").unwrap();
        let back = f.unwrap(b"secret").unwrap().expect("opens");
        assert_eq!(back.blob_id(b"x"), k.blob_id(b"x"));
        assert!(f.unwrap(b"wrong").unwrap().is_none());
    }

    #[test]
    fn a_key_file_asking_for_unbounded_work_is_refused() {
        let f = KeyFile::wrap(&MasterKey::generate(), b"secret").unwrap();
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
        let k = MasterKey::generate();
        let mut s = k.seal(b"hello");
        assert_eq!(k.open(&s, "x").unwrap(), b"hello");
        s[30] ^= 1;
        assert!(k.open(&s, "x").is_err());
    }
}

//! The archived form of one WAL file: a fixed header, then the (compressed, possibly
//! encrypted) bytes.
//!
//! ```text
//! offset size
//!      0    8  magic "FERRYWAL"
//!      8    1  format version (1)
//!      9    1  compression: 0 none, 1 zstd
//!     10    1  cipher: 0 none, 1 XChaCha20-Poly1305
//!     11    1  reserved, 0
//!     12    8  length of the original file, little endian
//!     20   32  cipher 0: BLAKE3 of the original file
//!              cipher 1: keyed BLAKE3 (the WAL key's hash key) of the file's name and bytes
//!     52       cipher 0: payload
//!              cipher 1: 24-byte random nonce, then the payload sealed with the WAL key's
//!                        encryption key, associated data = the 52 header bytes and the name
//! ```
//! The header carries the checksum of the original bytes so that a fetch verifies what it
//! hands to PostgreSQL, and a push can tell "already archived, same content" from "another
//! file under this name" by reading 52 bytes. Encrypted, that checksum is keyed: a plain hash
//! would let whoever reads the store confirm a guess of a segment's content.

use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ferry_transfer::{Error, Result};
use rand::RngCore;

const MAGIC: &[u8; 8] = b"FERRYWAL";
const VERSION: u8 = 1;
/// Bytes before the payload (before the nonce, when encrypted).
pub const HEADER_LEN: usize = 52;
/// XChaCha20-Poly1305's nonce: 192 random bits never repeat in practice.
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Larger than any WAL file PostgreSQL writes (segments are at most 1 GiB): a header that
/// claims more is corrupt, and must not make a fetch allocate it.
pub const MAX_LEN: u64 = 1 << 30;
/// The largest object a WAL file can be stored as: [`MAX_LEN`] in its envelope. A larger
/// object is refused before a byte of it is read.
pub const MAX_OBJECT: u64 = object_bound(MAX_LEN);

/// The largest object a WAL file of at most `len` bytes is stored as: `len` with zstd's worst
/// case (a few bytes per 128 KiB block; a push stores the original when zstd does not shrink
/// it) and the envelope around it.
pub const fn object_bound(len: u64) -> u64 {
    HEADER_LEN as u64 + NONCE_LEN as u64 + TAG_LEN as u64 + len + len / 128 + (1 << 20)
}
/// The context under which a repository derives the WAL archive's secret from its master key
/// (`MasterKey::subkey`); docs/wal.md names it. Changing it orphans every encrypted segment.
pub const KEY_CONTEXT: &str = "ferry wal v1";
/// BLAKE3 derivation contexts splitting the caller's secret into two keys.
const ENC_CONTEXT: &str = "ferry wal v1 2025 XChaCha20-Poly1305 key";
const MAC_CONTEXT: &str = "ferry wal v1 2025 content hash key";

/// The WAL archive's keys. The caller derives the 32-byte secret from its repository's
/// master key (the `ferry` CLI: `MasterKey::subkey("ferry wal v1")`); ferry-wal knows no
/// repository, only this. Two keys come out of it: one for the AEAD, one for the keyed
/// content hash.
#[derive(Clone)]
pub struct WalKey {
    enc: [u8; 32],
    mac: [u8; 32],
}

impl WalKey {
    /// The keys derived from `secret`.
    pub fn from_secret(secret: &[u8; 32]) -> Self {
        Self {
            enc: blake3::derive_key(ENC_CONTEXT, secret),
            mac: blake3::derive_key(MAC_CONTEXT, secret),
        }
    }

    /// The keyed checksum of the WAL file `name` holding `data`. The name is hashed too, so
    /// that equal content under two names does not show as equal checksums.
    fn hash(&self, name: &str, data: &[u8]) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.mac);
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(data);
        *h.finalize().as_bytes()
    }
}

impl std::fmt::Debug for WalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WalKey(..)")
    }
}

/// How the payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is (compression would not have shrunk it).
    None,
    /// One zstd frame.
    Zstd,
}

/// Whether the payload is encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// Plaintext; the checksum is a plain BLAKE3.
    None,
    /// XChaCha20-Poly1305 under a [`WalKey`]; the checksum is keyed.
    XChaCha20Poly1305,
}

/// The decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// How the payload is stored.
    pub compression: Compression,
    /// Whether it is encrypted.
    pub cipher: Cipher,
    /// Length of the original file.
    pub len: u64,
    /// Checksum of the original file: BLAKE3, or keyed BLAKE3 when encrypted.
    pub hash: [u8; 32],
}

impl Header {
    /// The plaintext header describing `data`, before compression.
    pub fn of(data: &[u8]) -> Self {
        Self {
            compression: Compression::None,
            cipher: Cipher::None,
            len: data.len() as u64,
            hash: *blake3::hash(data).as_bytes(),
        }
    }

    /// The header describing `data` archived as `name`: encrypted with `key`, or plaintext.
    pub fn for_file(data: &[u8], name: &str, key: Option<&WalKey>) -> Self {
        match key {
            None => Self::of(data),
            Some(k) => Self {
                compression: Compression::None,
                cipher: Cipher::XChaCha20Poly1305,
                len: data.len() as u64,
                hash: k.hash(name, data),
            },
        }
    }

    /// Same original content (both checksums computed the same way).
    pub fn same_content(&self, other: &Header) -> bool {
        self.cipher == other.cipher && self.len == other.len && self.hash == other.hash
    }

    /// Whether this header, whichever way it was made, describes `data` archived as `name`;
    /// `None` when that cannot be told (encrypted, and no key).
    pub fn describes(&self, data: &[u8], name: &str, key: Option<&WalKey>) -> Option<bool> {
        let mine = match self.cipher {
            Cipher::None => Self::of(data),
            Cipher::XChaCha20Poly1305 => Self::for_file(data, name, Some(key?)),
        };
        Some(self.same_content(&mine))
    }

    /// The checksum as hex, for acks and messages.
    pub fn hash_hex(&self) -> String {
        hex::encode(self.hash)
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(match self.compression {
            Compression::None => 0,
            Compression::Zstd => 1,
        });
        out.push(match self.cipher {
            Cipher::None => 0,
            Cipher::XChaCha20Poly1305 => 1,
        });
        out.push(0);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.hash);
    }

    /// Parses the first [`HEADER_LEN`] bytes of an archived object; `what` names it in errors.
    pub fn parse(b: &[u8], what: &str) -> Result<Self> {
        let corrupt =
            |why: &str| Error::Checksum(format!("{what}: corrupted in the archive: {why}"));
        if b.len() < HEADER_LEN || &b[..8] != MAGIC {
            return Err(corrupt("not a ferry WAL object (bad header)"));
        }
        if b[8] != VERSION {
            return Err(corrupt(&format!(
                "format version {} is newer than this ferry understands",
                b[8]
            )));
        }
        if b[11] != 0 {
            return Err(corrupt("reserved header byte is set"));
        }
        let cipher = match b[10] {
            0 => Cipher::None,
            1 => Cipher::XChaCha20Poly1305,
            c => return Err(corrupt(&format!("unknown cipher {c}"))),
        };
        let compression = match b[9] {
            0 => Compression::None,
            1 => Compression::Zstd,
            c => return Err(corrupt(&format!("unknown compression {c}"))),
        };
        let len = u64::from_le_bytes(b[12..20].try_into().expect("8 bytes"));
        if len > MAX_LEN {
            return Err(corrupt("header claims an impossible length"));
        }
        Ok(Self {
            compression,
            cipher,
            len,
            hash: b[20..52].try_into().expect("32 bytes"),
        })
    }
}

/// The associated data of an encrypted object: its header and its name, so that neither
/// the header nor the name it is stored under can change unnoticed (a segment moved to
/// another segment's name does not decrypt).
fn aad(header: &[u8], name: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + name.len());
    v.extend_from_slice(&header[..HEADER_LEN]);
    v.extend_from_slice(name.as_bytes());
    v
}

/// Wraps `data`, the WAL file `name`, for the archive: zstd-compressed at `level` unless
/// that does not shrink it (`level` 0: never compress), then encrypted when `key` is given.
///
/// The object is built in one buffer, compressed into it and encrypted in place: the push
/// agent holds many WAL files at once, and each then costs its original and its object,
/// not a third copy in between.
pub fn seal(
    data: &[u8], level: i32, name: &str, key: Option<&WalKey>,
) -> Result<(Header, Vec<u8>)> {
    let mut header = Header::for_file(data, name, key);
    let lead = HEADER_LEN + if key.is_some() { NONCE_LEN } else { 0 };
    let room = zstd::zstd_safe::compress_bound(data.len()).max(data.len());
    let mut out = Vec::with_capacity(lead + room + TAG_LEN);
    out.resize(lead, 0);
    if level > 0 {
        let mut z = zstd::bulk::Compressor::new(level)
            .map_err(|e| Error::Permanent(format!("compress: {e}")))?;
        // After the lead: a cursor, since zstd writes a plain Vec from its start.
        let mut after = std::io::Cursor::new(&mut out);
        after.set_position(lead as u64);
        z.compress_to_buffer(data, &mut after)
            .map_err(|e| Error::Permanent(format!("compress: {e}")))?;
    }
    if level > 0 && out.len() - lead < data.len() {
        header.compression = Compression::Zstd;
    } else {
        out.truncate(lead);
        out.extend_from_slice(data);
    }
    let mut head = Vec::with_capacity(HEADER_LEN);
    header.write(&mut head);
    out[..HEADER_LEN].copy_from_slice(&head);
    if let Some(k) = key {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        out[HEADER_LEN..lead].copy_from_slice(&nonce);
        let tag = XChaCha20Poly1305::new((&k.enc).into())
            .encrypt_in_place_detached(
                XNonce::from_slice(&nonce),
                &aad(&head, name),
                &mut out[lead..],
            )
            .map_err(|_| Error::Permanent(format!("{name}: encryption failed")))?;
        out.extend_from_slice(&tag);
    }
    // Room was made for zstd's worst case: a compressed segment would otherwise keep its
    // original's size in memory while it waits to be stored, counted at its own.
    out.shrink_to_fit();
    Ok((header, out))
}

/// Unwraps an archived object, the WAL file `name`, and checks it against its header: the
/// original bytes, or an error naming `what`. An encrypted object needs `key`; given a key,
/// a plaintext object is refused: anyone who can write the store could have put it there,
/// and nothing authenticates it (a downgrade). A header that claims more than `max_len`
/// bytes (the cluster's segment size, for a segment) is refused before anything is
/// decrypted or decompressed.
pub fn open(
    obj: &[u8], what: &str, name: &str, key: Option<&WalKey>, max_len: u64,
) -> Result<(Header, Vec<u8>)> {
    let header = Header::parse(obj, what)?;
    if header.len > max_len {
        return Err(Error::Checksum(format!(
            "{what}: corrupted in the archive: its header claims {} bytes, more than the {max_len} \
             such a file holds",
            header.len
        )));
    }
    let rest = &obj[HEADER_LEN..];
    let opened;
    let payload = match header.cipher {
        Cipher::None if key.is_some() => return Err(downgraded(what)),
        Cipher::None => rest,
        Cipher::XChaCha20Poly1305 => {
            let Some(k) = key else {
                return Err(Error::Invalid(format!(
                    "{what} is encrypted and no repository key was given: --repo must name \
                     the initialized ferry repository it was archived to (with its password)"
                )));
            };
            if rest.len() < NONCE_LEN + TAG_LEN {
                return Err(Error::Checksum(format!(
                    "{what}: corrupted in the archive: truncated to {} bytes",
                    obj.len()
                )));
            }
            let (nonce, ct) = rest.split_at(NONCE_LEN);
            opened = XChaCha20Poly1305::new((&k.enc).into())
                .decrypt(
                    XNonce::from_slice(nonce),
                    Payload {
                        msg: ct,
                        aad: &aad(obj, name),
                    },
                )
                .map_err(|_| {
                    Error::Checksum(format!(
                        "{what}: does not decrypt: corrupted in the archive, moved from \
                         another name, or not this repository's"
                    ))
                })?;
            &opened[..]
        }
    };
    let data = match header.compression {
        Compression::None => payload.to_vec(),
        Compression::Zstd => zstd::bulk::decompress(payload, header.len as usize).map_err(|e| {
            Error::Checksum(format!(
                "{what}: corrupted in the archive (does not decompress: {e})"
            ))
        })?,
    };
    if header.describes(&data, name, key) != Some(true) {
        return Err(Error::Checksum(format!(
            "{what}: content does not match its checksum (corrupted in the archive)"
        )));
    }
    Ok((header, data))
}

/// The error for a plaintext object where the archive is encrypted.
pub fn downgraded(what: &str) -> Error {
    Error::Checksum(format!(
        "{what}: stored unencrypted in an encrypted archive: refused (nothing authenticates \
         it; whoever can write the store may have put it there)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "000000010000000000000003";

    fn samples() -> Vec<Vec<u8>> {
        let text = b"insert into t values (1);".repeat(1000);
        let noise: Vec<u8> = (0..10_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        vec![Vec::new(), text, noise]
    }

    fn key(b: u8) -> WalKey {
        WalKey::from_secret(&[b; 32])
    }

    #[test]
    fn round_trips_compressible_and_not() {
        for data in samples() {
            let (h, obj) = seal(&data, 1, NAME, None).unwrap();
            assert!(obj.len() <= HEADER_LEN + data.len());
            let (h2, back) = open(&obj, "x", NAME, None, MAX_LEN).unwrap();
            assert_eq!((h, back), (h2, data));
        }
    }

    #[test]
    fn encrypted_round_trips_and_hides_the_content() {
        let k = key(7);
        for data in samples() {
            let (h, obj) = seal(&data, 1, NAME, Some(&k)).unwrap();
            assert_eq!(h.cipher, Cipher::XChaCha20Poly1305);
            assert_eq!(obj[10], 1, "cipher byte");
            assert!(obj.len() <= HEADER_LEN + NONCE_LEN + data.len() + TAG_LEN);
            // Neither a plain checksum nor any 64-byte run of the original is stored.
            assert_ne!(h.hash, *blake3::hash(&data).as_bytes());
            if data.len() >= 64 {
                assert!(!obj.windows(64).any(|w| w == &data[..64]));
            }
            let (h2, back) = open(&obj, "x", NAME, Some(&k), MAX_LEN).unwrap();
            assert_eq!((h, back), (h2, data));
        }
    }

    #[test]
    fn sealing_twice_gives_the_same_header_and_other_bytes() {
        let data = b"abc".repeat(100);
        let (h1, o1) = seal(&data, 1, NAME, Some(&key(1))).unwrap();
        let (h2, o2) = seal(&data, 1, NAME, Some(&key(1))).unwrap();
        assert!(
            h1.same_content(&h2),
            "a retried push must find its own object"
        );
        assert_ne!(o1, o2, "random nonce");
        // Another name or another key: another checksum.
        let (h3, _) = seal(&data, 1, "000000010000000000000004", Some(&key(1))).unwrap();
        let (h4, _) = seal(&data, 1, NAME, Some(&key(2))).unwrap();
        assert!(!h1.same_content(&h3) && !h1.same_content(&h4));
        // A plaintext header of the same content is recognised through `describes`.
        let (p, _) = seal(&data, 1, NAME, None).unwrap();
        assert!(!p.same_content(&h1));
        assert_eq!(p.describes(&data, NAME, Some(&key(1))), Some(true));
        assert_eq!(h1.describes(&data, NAME, Some(&key(1))), Some(true));
        assert_eq!(h1.describes(&data, NAME, None), None);
        assert_eq!(h1.describes(b"other", NAME, Some(&key(1))), Some(false));
    }

    #[test]
    fn wrong_key_other_name_or_no_key_is_refused() {
        let data = b"0123456789abcdef".repeat(64);
        let (_, obj) = seal(&data, 1, NAME, Some(&key(1))).unwrap();
        let e = open(&obj, "x", NAME, Some(&key(2)), MAX_LEN).unwrap_err();
        assert!(e.to_string().contains("does not decrypt"), "{e}");
        let e = open(
            &obj,
            "x",
            "000000010000000000000004",
            Some(&key(1)),
            MAX_LEN,
        )
        .unwrap_err();
        assert!(e.to_string().contains("does not decrypt"), "{e}");
        let e = open(&obj, "x", NAME, None, MAX_LEN).unwrap_err();
        assert!(e.to_string().contains("is encrypted"), "{e}");
        // A plaintext object is refused when a key is given: nothing authenticates it.
        let (_, plain) = seal(&data, 1, NAME, None).unwrap();
        let e = open(&plain, "x", NAME, Some(&key(1)), MAX_LEN).unwrap_err();
        assert!(e.to_string().contains("unencrypted"), "{e}");
        assert_eq!(open(&plain, "x", NAME, None, MAX_LEN).unwrap().1, data);
    }

    #[test]
    fn no_flipped_bit_changes_the_content() {
        let data = b"0123456789abcdef".repeat(64);
        let k = key(3);
        for key in [None, Some(&k)] {
            let (_, obj) = seal(&data, 3, NAME, key).unwrap();
            for i in (0..obj.len()).step_by(7) {
                let mut bad = obj.clone();
                bad[i] ^= 0x10;
                // A flip may be harmless (a zstd frame flag), but never yields other bytes.
                if let Ok((_, back)) = open(&bad, "x", NAME, key, MAX_LEN) {
                    assert!(key.is_none(), "flip at {i} passed the AEAD");
                    assert_eq!(back, data, "flip at {i} changed the content unnoticed");
                }
                if i < HEADER_LEN {
                    assert!(
                        open(&bad, "x", NAME, key, MAX_LEN).is_err(),
                        "header flip at {i} went unnoticed"
                    );
                }
            }
            assert!(open(&obj[..obj.len() - 1], "x", NAME, key, MAX_LEN).is_err());
        }
    }
}

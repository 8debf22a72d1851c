//! The archived form of one WAL file: a fixed header, then the (compressed) bytes.
//!
//! ```text
//! offset size
//!      0    8  magic "FERRYWAL"
//!      8    1  format version (1)
//!      9    1  compression: 0 none, 1 zstd
//!     10    1  cipher: 0 none (reserved for the repository's AEAD, see docs/wal.md)
//!     11    1  reserved, 0
//!     12    8  length of the original file, little endian
//!     20   32  BLAKE3 of the original file
//!     52       payload
//! ```
//! The header carries the checksum of the original bytes so that a fetch verifies what it
//! hands to PostgreSQL, and a push can tell "already archived, same content" from "another
//! file under this name" by reading 52 bytes.

use ferry_store::{Error, Result};

const MAGIC: &[u8; 8] = b"FERRYWAL";
const VERSION: u8 = 1;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 52;
/// Larger than any WAL file PostgreSQL writes (segments are at most 1 GiB): a header that
/// claims more is corrupt, and must not make a fetch allocate it.
const MAX_LEN: u64 = 1 << 30;

/// How the payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is (compression would not have shrunk it).
    None,
    /// One zstd frame.
    Zstd,
}

/// The decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// How the payload is stored.
    pub compression: Compression,
    /// Length of the original file.
    pub len: u64,
    /// BLAKE3 of the original file.
    pub hash: [u8; 32],
}

impl Header {
    /// The header describing `data`, before compression.
    pub fn of(data: &[u8]) -> Self {
        Self {
            compression: Compression::None,
            len: data.len() as u64,
            hash: *blake3::hash(data).as_bytes(),
        }
    }

    /// Same original content.
    pub fn same_content(&self, other: &Header) -> bool {
        self.len == other.len && self.hash == other.hash
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
        out.extend_from_slice(&[0, 0]);
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
        if b[10] != 0 {
            return Err(corrupt("encrypted with a cipher this ferry does not know"));
        }
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
            len,
            hash: b[20..52].try_into().expect("32 bytes"),
        })
    }
}

/// Wraps `data` for the archive, zstd-compressed at `level` unless that does not shrink it
/// (`level` 0: never compress).
pub fn seal(data: &[u8], level: i32) -> Result<(Header, Vec<u8>)> {
    let mut header = Header::of(data);
    let packed = if level > 0 {
        zstd::bulk::compress(data, level).map_err(|e| Error::Permanent(format!("compress: {e}")))?
    } else {
        Vec::new()
    };
    let mut out = Vec::with_capacity(HEADER_LEN + packed.len().min(data.len()));
    if level > 0 && packed.len() < data.len() {
        header.compression = Compression::Zstd;
        header.write(&mut out);
        out.extend_from_slice(&packed);
    } else {
        header.write(&mut out);
        out.extend_from_slice(data);
    }
    Ok((header, out))
}

/// Unwraps an archived object and checks it against its header: the original bytes, or a
/// [`Error::Checksum`] naming `what`.
pub fn open(obj: &[u8], what: &str) -> Result<(Header, Vec<u8>)> {
    let header = Header::parse(obj, what)?;
    let payload = &obj[HEADER_LEN..];
    let data = match header.compression {
        Compression::None => payload.to_vec(),
        Compression::Zstd => zstd::bulk::decompress(payload, header.len as usize).map_err(|e| {
            Error::Checksum(format!(
                "{what}: corrupted in the archive (does not decompress: {e})"
            ))
        })?,
    };
    if !header.same_content(&Header::of(&data)) {
        return Err(Error::Checksum(format!(
            "{what}: content does not match its checksum (corrupted in the archive)"
        )));
    }
    Ok((header, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_compressible_and_not() {
        let text = b"insert into t values (1);".repeat(1000);
        let noise: Vec<u8> = (0..10_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for data in [Vec::new(), text, noise] {
            let (h, obj) = seal(&data, 1).unwrap();
            assert!(obj.len() <= HEADER_LEN + data.len());
            let (h2, back) = open(&obj, "x").unwrap();
            assert_eq!((h, back), (h2, data));
        }
    }

    #[test]
    fn no_flipped_bit_changes_the_content() {
        let data = b"0123456789abcdef".repeat(64);
        let (_, obj) = seal(&data, 3).unwrap();
        for i in (0..obj.len()).step_by(7) {
            let mut bad = obj.clone();
            bad[i] ^= 0x10;
            // A flip may be harmless (a zstd frame flag), but never yields other bytes.
            if let Ok((_, back)) = open(&bad, "x") {
                assert_eq!(back, data, "flip at {i} changed the content unnoticed");
            }
            if i < HEADER_LEN {
                assert!(
                    open(&bad, "x").is_err(),
                    "header flip at {i} went unnoticed"
                );
            }
        }
        assert!(open(&obj[..obj.len() - 1], "x").is_err());
    }
}

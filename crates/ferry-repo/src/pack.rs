//! Packs: many encrypted blobs in one object of tens of MiB, so that a backup of 100k small
//! files makes hundreds of uploads, not 100k.
//!
//! ```text
//! blob 0 (sealed) | blob 1 (sealed) | ... | header (sealed) | header length (u32 LE)
//! header plaintext: per blob: kind (u8) | id (32) | offset | sealed length | plaintext length
//!                   (u32 LE each)
//! ```
//! A pack is named by the BLAKE3 of its bytes, so `check --read-data` can verify it whole.

use ferry_transfer::{Error, Result};

use crate::crypto::{Kind, MasterKey};
use crate::id::Id;

/// What a blob holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlobKind {
    /// File content.
    Data,
    /// A directory listing (a [`crate::tree::Tree`]).
    Tree,
}

impl BlobKind {
    /// What a blob of this kind is sealed as.
    pub fn sealed(self) -> Kind {
        match self {
            BlobKind::Data => Kind::DataBlob,
            BlobKind::Tree => Kind::TreeBlob,
        }
    }

    fn byte(self) -> u8 {
        match self {
            BlobKind::Data => 0,
            BlobKind::Tree => 1,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(BlobKind::Data),
            1 => Some(BlobKind::Tree),
            _ => None,
        }
    }
}

/// Where one blob sits in its pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// What it holds.
    pub kind: BlobKind,
    /// Keyed BLAKE3 of its plaintext.
    pub id: Id,
    /// Byte offset in the pack.
    pub offset: u32,
    /// Sealed length.
    pub len: u32,
    /// Plaintext length: a restore places the blob in its file without reading it first.
    pub plain_len: u32,
}

pub(crate) const ENTRY_LEN: usize = 1 + 32 + 4 + 4 + 4;

pub(crate) fn encode_entries(entries: &[Entry], out: &mut Vec<u8>) {
    for e in entries {
        out.push(e.kind.byte());
        out.extend_from_slice(&e.id.0);
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
        out.extend_from_slice(&e.plain_len.to_le_bytes());
    }
}

/// Parses a blob list (a pack header's plaintext, or one pack's part of an index file).
pub fn decode_entries(b: &[u8], what: &str) -> Result<Vec<Entry>> {
    let bad = || Error::Checksum(format!("{what}: malformed blob list"));
    if !b.len().is_multiple_of(ENTRY_LEN) {
        return Err(bad());
    }
    b.chunks_exact(ENTRY_LEN)
        .map(|c| {
            Ok(Entry {
                kind: BlobKind::from_byte(c[0]).ok_or_else(bad)?,
                id: Id(c[1..33].try_into().expect("32 bytes")),
                offset: u32::from_le_bytes(c[33..37].try_into().expect("4 bytes")),
                len: u32::from_le_bytes(c[37..41].try_into().expect("4 bytes")),
                plain_len: u32::from_le_bytes(c[41..45].try_into().expect("4 bytes")),
            })
        })
        .collect()
}

/// Collects sealed blobs into one pack.
#[derive(Debug, Default)]
pub struct Packer {
    buf: Vec<u8>,
    entries: Vec<Entry>,
}

impl Packer {
    /// A packer whose buffer has room for `cap` bytes from the start: a pack grown by
    /// doubling would fault in fresh pages, and copy, at each step.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            buf: ferry_transfer::buffer::with_capacity(cap),
            entries: Vec::new(),
        }
    }

    /// Appends a sealed blob.
    pub fn add(&mut self, kind: BlobKind, id: Id, sealed: &[u8], plain_len: usize) {
        self.entries.push(Entry {
            kind,
            id,
            offset: self.buf.len() as u32,
            len: sealed.len() as u32,
            plain_len: plain_len as u32,
        });
        self.buf.extend_from_slice(sealed);
    }

    /// Bytes so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when no blob was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The finished pack: its id, bytes and blob list.
    pub fn finish(self, key: &MasterKey) -> (Id, Vec<u8>, Vec<Entry>) {
        let mut plain = Vec::with_capacity(self.entries.len() * ENTRY_LEN);
        encode_entries(&self.entries, &mut plain);
        let header = key.seal(Kind::PackHeader, &plain);
        let mut buf = self.buf;
        buf.extend_from_slice(&header);
        buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
        (Id::of(&buf), buf, self.entries)
    }
}

/// Reads a whole pack's blob list from its trailing header.
pub fn read_header(pack: &[u8], key: &MasterKey, what: &str) -> Result<Vec<Entry>> {
    let bad = || Error::Checksum(format!("{what}: pack header damaged"));
    if pack.len() < 4 {
        return Err(bad());
    }
    let (body, len) = pack.split_at(pack.len() - 4);
    let hlen = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    if hlen > body.len() {
        return Err(bad());
    }
    let plain = key.open(Kind::PackHeader, &body[body.len() - hlen..], what)?;
    decode_entries(&plain, what)
}
